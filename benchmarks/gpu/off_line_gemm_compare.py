"""GEMMs whose rows start off 128-byte lines (K or N no multiple of 64; A row-major, B an ``nn.Linear`` n x k weight,
bf16): the hero (``gemm_heroes.off_line``'s pairs sharing B's boxes) beside the hero before that rule, each a full
``tracea bench`` (verified on fresh random inputs, then timed beside cuBLAS with CUDA events in the same process).
Cells: cuBLAS's time over Tracea's (> 1: Tracea faster) / Tracea's median in us.

    python benchmarks/gpu/off_line_gemm_compare.py [--match TEXT]

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse

from conv_channel_stride import cell  # the benchmarks/gpu script beside this one

from tracea.doctor import probe
from tracea.emitters.cuda.hopper import gemm_heroes
from tracea.emitters.cuda.hopper.schedule import hero_schedule
from tracea.kernels import Gemm

SHAPES = [(50176, 440, 440), (12544, 888, 888), (32768, 200, 200), (16384, 360, 360), (100352, 96, 864),
          (8192, 1000, 2048), (8192, 4104, 4096), (8192, 11000, 4096), (4096, 4096, 1000), (2048, 2056, 2048),
          (2048, 2048, 2056), (8192, 2048, 1000)]


def before(op: Gemm) -> object:
    """The GEMM core's hero without ``off_line``."""
    sm = 132
    return gemm_heroes.one_wave(op, sm) or gemm_heroes.many_waves(op, sm) or gemm_heroes.few_tiles(op, sm) or \
        hero_schedule(op, sm)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    a = ap.parse_args()
    host = probe()
    print("m x n x k | hero (name) | before (name)", flush=True)
    for m, n, k in SHAPES:
        op = Gemm(m, n, k, "bf16", layout_b="col")
        if a.match not in op.signature:
            continue
        hero, old = gemm_heroes.gemm_hero_schedule(op), before(op)
        now = cell(op, host, None)
        then = now if old == hero else cell(op, host, old)
        print(f"{m} x {n} x {k} | {now} ({hero.name}) | {then} ({old.name})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
