"""Split-K forms for GEMMs whose activations are no small operand and whose K is long (N < 4 M: the shapes
``gemm_heroes.WEIGHT_SHARE`` leaves to the heuristic's split-K; 512 x 512 x 16384 ran 0.88x cuBLAS on an H200 there,
26 us against 23.5). Each shape: the hero's schedule beside split forms of other tiles, slice counts, ring depths,
raster order and load hints, each a full ``tracea bench`` (verified on fresh random inputs, then timed beside cuBLAS
with CUDA events, the L2 emptied before each call). One line a shape: each form's ratio to cuBLAS (> 1: Tracea
faster) and Tracea's median in us.

    python benchmarks/gpu/long_k_split_forms.py [--match TEXT] [--forms a,b] [--deadline S]
        # --forms: names from FORMS, comma-separated (default: all of them)

The "spread" forms cut K into more slices than the heuristic's 16 (``schedule.MAX_SPLIT``), each tile's sum shared
among its slices' blocks (``splitk.spread``): 256 x 256 x 16384 ran 0.61x on an H200 with every form above capped
at 16 slices, where 128 x 128 tiles over 32 slices fill 128 SMs and read each operand panel twice, not four times.

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import time

from mid_m_gemm_forms import _ts, cells, in_time, line, measure  # benchmarks/gpu/ (this script's folder)

from tracea.doctor import probe
from tracea.emitters.cuda.hopper.gemm_heroes import gemm_hero_schedule
from tracea.kernels import Gemm

SHAPES = [Gemm(256, 256, 16384, "bf16"), Gemm(128, 128, 32768, "bf16"), Gemm(256, 512, 16384, "fp16"),
          Gemm(384, 384, 12288, "bf16", layout_b="col"), Gemm(256, 256, 8192, "bf16"), Gemm(192, 320, 16384, "bf16"),
          # small outputs of other kinds (``gemm_heroes.few_tiles``): 64 rows, nn.Linear's weights, fp16, odd sizes
          Gemm(64, 1024, 4096, "bf16"), Gemm(64, 512, 8192, "fp16"), Gemm(128, 256, 16384, "bf16", layout_b="col"),
          Gemm(96, 384, 16384, "fp16", layout_b="col"), Gemm(320, 192, 12000, "bf16"), Gemm(200, 136, 30000, "bf16"),
          Gemm(512, 512, 16384, "bf16"), Gemm(384, 768, 16384, "bf16", layout_b="col"), Gemm(512, 1024, 8192, "bf16"),
          Gemm(1024, 1024, 8192, "bf16"), Gemm(512, 512, 16384, "fp16")]
FORMS = {
    "64x128 s5 k2": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=2),
    "64x128 s5 k3": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=3),
    "64x128 s5 k6": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=6),
    "64x128 s5 k8": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=8),
    "64x128 s8 auto": _ts(bm=64, bn=128, stages=8, consumers=1, l2_hint="first", split=0),
    "64x128 s5 auto raster n": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=0, raster="n"),
    "64x128 s5 auto no hint": _ts(bm=64, bn=128, stages=5, consumers=1, split=0),
    "64x64 s12 auto": _ts(bm=64, bn=64, stages=12, consumers=1, l2_hint="first", split=0),
    "64x64 s5 k4": _ts(bm=64, bn=64, stages=5, consumers=1, l2_hint="first", split=4),
    "128x64 s5 auto": _ts(bm=128, bn=64, stages=5, consumers=2, l2_hint="first", split=0),
    "128x128 s5 auto": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=0),
    "128x128 s4 k4": _ts(bm=128, bn=128, stages=4, consumers=2, l2_hint="first", split=4),
    "64x128 s5 auto": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=0),
    "64x64 s8 auto spread": _ts(bm=64, bn=64, stages=8, consumers=1, l2_hint="first", split=0, split_fix="spread"),
    "64x64 s5 auto spread": _ts(bm=64, bn=64, stages=5, consumers=1, l2_hint="first", split=0, split_fix="spread"),
    "64x64 s12 auto spread": _ts(bm=64, bn=64, stages=12, consumers=1, l2_hint="first", split=0, split_fix="spread"),
    "64x64 s8 k32 spread": _ts(bm=64, bn=64, stages=8, consumers=1, l2_hint="first", split=32, split_fix="spread"),
    "64x64 s8 cl2n auto spread": _ts(bm=64, bn=64, stages=8, consumers=1, l2_hint="first", split=0,
                                     split_fix="spread", cluster=2, cluster_axis="n"),
    "64x64 s12 cl2n auto spread": _ts(bm=64, bn=64, stages=12, consumers=1, l2_hint="first", split=0,
                                      split_fix="spread", cluster=2, cluster_axis="n"),
    "64x128 s8 cl2m auto spread": _ts(bm=64, bn=128, stages=8, consumers=1, l2_hint="first", split=0,
                                      split_fix="spread", cluster=2),
    "64x128 s5 cl2m auto spread": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=0,
                                      split_fix="spread", cluster=2),
    "64x128 s8 cl2m auto": _ts(bm=64, bn=128, stages=8, consumers=1, l2_hint="first", split=0, cluster=2),
    "64x64 s8 k8 spread": _ts(bm=64, bn=64, stages=8, consumers=1, l2_hint="first", split=8, split_fix="spread"),
    "64x128 s5 k16 spread": _ts(bm=64, bn=128, stages=5, consumers=1, l2_hint="first", split=16, split_fix="spread"),
    "128x128 s5 k8 spread": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=8, split_fix="spread"),
    "128x128 s5 k16 spread": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=16,
                                 split_fix="spread"),
    "128x128 s5 k32 spread": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=32,
                                 split_fix="spread"),
    "128x128 s4 k32 spread": _ts(bm=128, bn=128, stages=4, consumers=2, l2_hint="first", split=32,
                                 split_fix="spread"),
    "128x128 s5 k32 last": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=32),
    "128x128 s5 k32 spread no hint": _ts(bm=128, bn=128, stages=5, consumers=2, split=32, split_fix="spread"),
    "128x128 s5 k64 spread": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=64,
                                 split_fix="spread"),
    "128x256 s4 k32 spread": _ts(bm=128, bn=256, stages=4, consumers=2, l2_hint="first", split=32,
                                 split_fix="spread"),
    "128x256 s4 k64 spread": _ts(bm=128, bn=256, stages=4, consumers=2, l2_hint="first", split=64,
                                 split_fix="spread"),
    "128x128 cl2n k32 spread": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=32,
                                   split_fix="spread", cluster=2, cluster_axis="n"),
    "128x128 cl2m k32 spread": _ts(bm=128, bn=128, stages=5, consumers=2, l2_hint="first", split=32,
                                   split_fix="spread", cluster=2),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--deadline", type=float, default=1e9)
    a = ap.parse_args()
    names = [f for f in a.forms.split(",") if f]
    unknown = [f for f in names if f not in FORMS]
    if unknown:
        print(f"--forms: no form named {', '.join(unknown)}")
        return 2
    start = time.monotonic()
    host = probe()
    print("op | hero (name) | " + " | ".join(names) + "   [cells: ratio/us]", flush=True)
    for op in in_time(SHAPES, a.match, start + a.deadline):
        hero = gemm_hero_schedule(op)
        cols = [f"{measure(op, host, None)[0]} ({hero.name})", *cells(op, host, [FORMS[f] for f in names])]
        print(line(op, cols), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
