"""Decode GEMMs (M = 1-32) on Hopper against cuBLAS, and against the device's copy bandwidth (issue 34): the planned
kernel as a user runs it (the TMA-fed gemv on sm_90 where it applies), the register gemv's heuristic schedule,
and with ``--sweep`` other TMA rings and splits. Every figure is a full ``bench``: verified on fresh random
inputs, then timed beside cuBLAS with CUDA events, L2 flushed before each call.

    python benchmarks/gpu/decode_gemm.py [--rows suite|held|all|wide] [--sweep] [--splits 1,2,4] [--match TEXT] [--ms 8,32]

GB/s counts the op's bytes (A and B read once, C written once) over the median; "of copy" divides it by a 1 GiB
device-to-device copy (bytes read + written) measured in the same run. Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from tracea.doctor import probe
from tracea.emitters import copy_bandwidth
from tracea.emitters.bench import bench
from tracea.emitters.cuda import gemv, gemv_tma
from tracea.kernels import Gemm

LLM = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336)]
HELD = [(3072, 8192), (8192, 3072), (6144, 4096), (5120, 13824), (28672, 8192), (1024, 4096), (2560, 2560)]
# More column tiles than two blocks an SM hold (132 SMs: 264 of 64 columns): fused gate/up projections, vocabularies
WIDE = [(1, 28672, 8192), (8, 28672, 8192), (1, 32000, 4096), (16, 32000, 4096), (1, 128256, 4096), (4, 22016, 8192)]


def rows(which: str) -> list[Gemm]:
    out = []
    if which in ("suite", "all"):
        out += [Gemm(m, n, k, "bf16", layout_b="col") for m in (1, 16) for n, k in LLM]
        out += [Gemm(m, n, k, "bf16") for m in (1, 16) for n, k in LLM[:2]]  # row-major B (the suites' layout)
    if which == "wide":
        out += [Gemm(m, n, k, "bf16", layout_b="col") for m, n, k in WIDE]
    if which in ("held", "all"):
        out += [Gemm(m, n, k, dt, layout_b="col") for m, dt in ((1, "fp16"), (4, "bf16"), (8, "fp16"), (24, "fp16"),
                                                                (32, "bf16")) for n, k in HELD]
    return out


def sweep(op: Gemm) -> list[gemv_tma.GemvTmaSchedule]:
    hero = gemv_tma.hero_schedule(op, HOST)
    out = []
    for warps, stages, boxes, all_splits in ((4, 2, 4, True), (4, 4, 2, True), (4, 6, 2, False), (8, 2, 4, False),
                                             (4, 4, 4, False)):
        s = dataclasses.replace(hero, warps=warps, stages=stages, boxes=boxes)
        near = {max(1, hero.splits // 2), hero.splits, min(32, hero.splits * 2)} if all_splits else {hero.splits}
        for splits in sorted(near):
            c = dataclasses.replace(s, splits=splits)
            try:
                c.validate(op)
            except Exception:  # noqa: BLE001 - a ring too large for this row's A
                continue
            if c != hero and gemv_tma.k_stages(op, c) >= c.splits and c not in out:
                out.append(c)
    return out


def pinned(op: Gemm, sched: object) -> object:
    return bench(op, HOST, backend="cuda", variant="cuda-wgmma.gemm", repeats=30, tuned=lambda _o, _v: sched.to_json())


def line(label: str, op: Gemm, r: object, name: str, copy: float | None) -> None:
    ms = r.tracea.p50_ms if r.tracea else None
    base = r.baseline.p50_ms if r.baseline else None
    gbps = op.bytes / (ms * 1e-3) / 1e9 if ms else None
    of = f"{gbps / copy:.0%}" if gbps and copy else "-"
    ratio = "unstable" if r.unstable else (f"{r.ratio:.2f}" if r.ratio else "-")
    print(f"{op.m}x{op.n}x{op.k} {op.dtype.value} {op.layout_b:<3} {label:<8} {name:<34} {r.status:<8} "
          f"{ms and round(ms, 4)!s:>8} {base and round(base, 4)!s:>8} {ratio:>8} {gbps and round(gbps)!s:>6} {of:>5}"
          f" {r.error or ''}"[:220], flush=True)


HOST = None


def main() -> None:
    global HOST
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="suite", choices=("suite", "held", "all", "wide"))
    ap.add_argument("--splits", default="", help="the hero with each of these K splits, e.g. 1,2,4,8")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--match", default="")
    ap.add_argument("--ms", default="", help="rows of A to keep, e.g. 8,32 (default: every row's)")
    ap.add_argument("--budget", type=float, default=400.0, help="seconds; rows past it are skipped")
    a = ap.parse_args()
    HOST = probe()
    copy = copy_bandwidth.measured("cuda", HOST)
    gb = copy["value"] / 1e9 if copy and copy.get("value") else None
    print(f"device copy: {gb and round(gb)} GB/s ({copy and copy.get('method')})")
    print("shape dtype B label schedule status tracea_ms cublas_ms cublas/tracea GB/s of_copy")
    t0 = time.time()
    for op in rows(a.rows):
        keep = not a.ms or str(op.m) in a.ms.split(",")
        if not keep or a.match not in f"{op.m}x{op.n}x{op.k}" or time.time() - t0 > a.budget:
            continue
        r = bench(op, HOST, backend="cuda", repeats=30)
        sched = r.schedule or {}
        line("planned", op, r, f"{r.variant}:{sched.get('core', '')}:{gemv_tma.GemvTmaSchedule.from_json(sched).name if sched.get('core') == 'gemv_tma' else sched.get('core')}", gb)
        if op.m <= gemv.MAX_M:
            g = gemv.hero_schedule(op, HOST)
            line("register", op, pinned(op, g), g.name, gb)
        for k in filter(None, a.splits.split(",")):
            s = dataclasses.replace(gemv_tma.hero_schedule(op, HOST), splits=int(k))
            line("splits", op, pinned(op, s), s.name, gb)
        if a.sweep and gemv_tma.applies(op):
            for s in sweep(op):
                line("sweep", op, pinned(op, s), s.name, gb)


if __name__ == "__main__":
    main()
