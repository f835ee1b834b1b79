"""Split-K forms for GEMMs whose activations are no small operand and whose K is long (N < 4 M: the shapes
``gemm_heroes.WEIGHT_SHARE`` leaves to the heuristic's split-K; 512 x 512 x 16384 ran 0.88x cuBLAS on an H200 there,
26 us against 23.5). Each shape: the hero's schedule beside split forms of other tiles, slice counts, ring depths,
raster order and load hints, each a full ``tracea bench`` (verified on fresh random inputs, then timed beside cuBLAS
with CUDA events, the L2 emptied before each call). One line a shape: each form's ratio to cuBLAS (> 1: Tracea
faster) and Tracea's median in us.

    python benchmarks/gpu/long_k_split_forms.py [--match TEXT] [--deadline S]

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import time

from mid_m_gemm_forms import _ts, cells, in_time, line, measure  # benchmarks/gpu/ (this script's folder)

from tracea.doctor import probe
from tracea.emitters.cuda.hopper.gemm_heroes import gemm_hero_schedule
from tracea.kernels import Gemm

SHAPES = [Gemm(512, 512, 16384, "bf16"), Gemm(512, 512, 16384, "fp16"), Gemm(256, 256, 16384, "bf16"),
          Gemm(512, 1024, 8192, "bf16"), Gemm(384, 768, 16384, "bf16", layout_b="col"), Gemm(1024, 1024, 8192, "bf16")]
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
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    ap.add_argument("--deadline", type=float, default=1e9)
    a = ap.parse_args()
    start = time.monotonic()
    host = probe()
    print("op | hero (name) | " + " | ".join(FORMS) + "   [cells: ratio/us]", flush=True)
    for op in in_time(SHAPES, a.match, start + a.deadline):
        hero = gemm_hero_schedule(op)
        cols = [f"{measure(op, host, None)[0]} ({hero.name})", *cells(op, host, list(FORMS.values()))]
        print(line(op, cols), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
