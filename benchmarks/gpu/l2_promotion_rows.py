"""The tensor maps' L2 promotion rule (``tma.promotion_for``: 128-byte promotion for maps whose rows start off
128-byte lines, 256-byte for the rest) against 256-byte promotion everywhere (the rule before it), on rows chosen
for it: 1x1 and 3x3 convs over channel counts whose rows are no multiple of 128 bytes, GEMMs and a decode
GEMM with such a K or N, attention with head dims of 32, 40, 80 and 96 (and decode at 80). Each row is planned as a
user runs it (the hero), verified, then timed beside the vendor library by ``bench``, twice under each setting in
alternation (rule, before, rule, before); each cell is the faster of the two medians, with its ratio to the
vendor's time in that run.

    python benchmarks/gpu/l2_promotion_rows.py [--match TEXT]

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse

from conv_channel_stride import conv  # the benchmarks/gpu script beside this one

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda import tma
from tracea.kernels import Attention, Gemm

RULE = tma.OFF_LINE_PROMOTION  # the rule's promotion for maps off lines; "before" sets 256-byte there too
ROWS = [conv(64, 440, 28, 440, 1), conv(64, 440, 14, 440, 1), conv(64, 888, 7, 888, 1), conv(64, 888, 14, 888, 1),
        conv(32, 200, 28, 200, 1), conv(64, 672, 14, 112, 1), conv(32, 120, 56, 360, 1), conv(16, 1000, 14, 1000, 1),
        conv(32, 96, 56, 96, 3), conv(16, 48, 112, 48, 3), conv(16, 200, 28, 200, 3), conv(32, 160, 28, 160, 3),
        Gemm(2048, 2048, 2056, "bf16"), Gemm(100, 20000, 4096, "bf16"), Gemm(4096, 4104, 4096, "bf16"),
        Gemm(1, 4096, 4104, "bf16", layout_b="col"), Gemm(16, 11000, 4096, "bf16", layout_b="col"),
        Attention(4, 32, 4096, 80, dtype="bf16"), Attention(4, 32, 4096, 96, dtype="bf16"),
        Attention(8, 16, 2048, 96, dtype="bf16", causal=True), Attention(8, 16, 2048, 32, dtype="bf16"),
        Attention(8, 16, 2048, 40, dtype="bf16"), Attention(16, 32, 1, 80, seq_k=4096, dtype="bf16")]


def timed(op: object, host: object, before: bool) -> tuple[float, float | None, str]:
    """(Tracea's median ms, its ratio to the vendor, status) with 256-byte promotion everywhere (``before``) or
    the rule."""
    tma.OFF_LINE_PROMOTION = "L2_256B" if before else RULE
    try:
        r = bench(op, host, backend="cuda", repeats=30)
    finally:
        tma.OFF_LINE_PROMOTION = RULE
    if r.status != "ok" or r.tracea is None:
        return float("nan"), None, f"{r.status} {(r.error or '')[:60]}"
    return r.tracea.p50_ms, r.ratio, "ok"



def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    a = ap.parse_args()
    host = probe()
    print("row | rule: Tracea us (vendor / Tracea) | before (256-byte everywhere) | before / rule", flush=True)
    for op in ROWS:
        if a.match not in op.signature:
            continue
        runs = {True: [], False: []}
        for before in (False, True, False, True):
            runs[before].append(timed(op, host, before))
        cells = []
        for before in (False, True):
            ok = [r for r in runs[before] if r[2] == "ok"]
            if not ok:
                cells.append(runs[before][0][2])
                continue
            ms, ratio, _ = min(ok)
            cells.append(f"{ms * 1000:7.1f} us ({'unstable' if ratio is None else f'{ratio:.3f}'})")
        best = {b: min((r[0] for r in runs[b] if r[2] == "ok"), default=float("nan")) for b in runs}
        print(f"{op.signature[:90]} | {cells[0]} | {cells[1]} | {best[True] / best[False]:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
