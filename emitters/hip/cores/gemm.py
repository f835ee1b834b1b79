"""The HIP GEMM's core: the MFMA GEMM body of ``emitters/hip/gemm.py``."""

from __future__ import annotations

from typing import Any

from .. import gemm as g
from ..core import HipCore, Launch, mfma_dtype, operand, schedule_check, tiled_hero, tiled_space

ORDER = 10  # the registry's order, and its variants'


def gemm_launch(op: Any, schedule: Any, target: str) -> Launch:
    dtype, needs = op.dtype.value, tuple(op.shapes())
    smem = schedule.lds_bytes(dtype) if target == "nvidia" else 0
    src = g.render(dtype, schedule, target, "gemm", op.epilogue, op.layout_a, op.layout_b)
    args = (("in", "a"), ("in", "b"), ("out", None), operand(needs, "bias"), operand(needs, "residual"),
            ("i32", op.m), ("i32", op.n), ("i32", op.k), ("f32", op.alpha))
    return Launch(g.KERNEL, src, g.grid(op.m, op.n, schedule), (schedule.threads, 1, 1), args, smem)


CORES = (
    HipCore(name="gemm", ops=("gemm",), family="hip-mfma", schedule=g.HipGemmSchedule, check_op=mfma_dtype,
            hero=lambda op, cus: tiled_hero(op.m, op.n, op.dtype.value, cus), space=tiled_space,
            check=schedule_check, render=gemm_launch, descriptions={
                "gemm": "Matrix Core GEMM: v_mfma_f32_32x32x8 (16-bit) or 32x32x2 (fp32) over 64-lane wavefronts, "
                        "double-buffered LDS, fp32 accumulation, fused epilogue"}),
)
