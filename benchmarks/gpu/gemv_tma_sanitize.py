"""Small launches of the TMA-fed decode GEMM (emitters/cuda/gemv_tma.py) for compute-sanitizer: every reduction
form (one block a tile, a cluster's shared memory, the global workspace), both B layouts, one and two 8-row
groups (up to four: 32 rows), K and N tails. Each is verified against the float64 reference, twice (the split counters reset).

    compute-sanitizer --tool racecheck python benchmarks/gpu/gemv_tma_sanitize.py
"""

from __future__ import annotations

import numpy as np

from tracea.emitters import cuda
from tracea.emitters.cuda.gemv_tma import GemvTmaSchedule
from tracea.kernels import Gemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64


class NoGpu:
    nvidia = None


CASES = [
    (Gemm(1, 72, 200, "bf16", layout_b="col"), GemvTmaSchedule(warps=4, stages=2, boxes=1, splits=1)),
    (Gemm(3, 136, 600, "fp16", layout_b="row", epilogue=("bias", "gelu")), GemvTmaSchedule(warps=4, stages=2, boxes=2, splits=3)),
    (Gemm(16, 64, 1000, "bf16", layout_b="col", epilogue=("residual",)), GemvTmaSchedule(warps=2, stages=3, boxes=1, splits=12)),
    (Gemm(9, 40, 136, "bf16", layout_b="row"), GemvTmaSchedule(warps=8, stages=2, boxes=2, splits=1)),
    (Gemm(29, 200, 520, "bf16", layout_b="col", epilogue=("bias",)), GemvTmaSchedule(warps=4, stages=2, boxes=2, splits=2)),
    (Gemm(32, 64, 256, "fp16", layout_b="row"), GemvTmaSchedule(warps=2, stages=2, boxes=1, splits=4)),
]


def main() -> None:
    bad = 0
    for op, s in CASES:
        k = cuda.build(op, "cuda-wgmma.gemm", s, NoGpu())
        for seed in (1, 2):
            inputs = op.random_inputs(np.random.default_rng(seed))
            out = np.full(op.output_shape(), 0x7FC0 if op.dtype.value == "bf16" else np.nan, op.dtype.storage)
            k(inputs, out)
            err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
            ok = err <= tolerance(op)
            bad += not ok
            print(f"{op.signature[:70]} {s.name} seed {seed}: rel err {err:.2e} {'ok' if ok else 'WRONG'}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
