"""The Metal GEMM's core: the simdgroup-matrix GEMM body of ``emitters/metal/gemm.py``."""

from __future__ import annotations

from typing import Any

from .. import gemm as g
from ..core import Launch, MetalCore

ORDER = 10  # the registry's order, and its variants'


def gemm_check(op: Any) -> None:
    """The dtypes the body computes, and buffers its 32-bit offsets reach."""
    g.check_dtype(op)
    g.check_elements("A", op.m, op.k)
    g.check_elements("B", op.k, op.n)
    g.check_elements("C", op.m, op.n)
    g.check_dims(m=op.m, n=op.n, k=op.k)


def schedule_check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    """The schedule's own check for ``op``'s dtype (the host does not enter)."""
    schedule.validate(op, host)


def gemm_launch(op: Any, schedule: g.MetalGemmSchedule) -> Launch:
    """The kernel and its arguments: A, B, the epilogue's operands it reads (none otherwise), C, then M, N,
    K and alpha where the chain scales."""
    dtype = op.dtype.value
    src = g.render(dtype, schedule, "gemm", op.epilogue, op.layout_a, op.layout_b)
    args = (("in", "a"), ("in", "b"), *(("in", name) for name in ("bias", "residual") if name in op.epilogue),
            ("out", None), ("i32", op.m), ("i32", op.n), ("i32", op.k),
            *((("f32", op.alpha),) if "scale" in op.epilogue else ()))
    return Launch(g.KERNEL, src, g.grid(op.m, op.n, schedule), (schedule.threads, 1, 1), args,
                  schedule.threadgroup_bytes(dtype))


CORES = (
    MetalCore(name="gemm", ops=("gemm",), family="metal-simdgroup", schedule=g.MetalGemmSchedule,
              check_op=gemm_check, hero=lambda op, cores: g.tiled_hero(op.m, op.n, op.dtype.value, cores),
              space=g.tiled_space, check=schedule_check, render=gemm_launch, descriptions={
                  "gemm": "simdgroup-matrix GEMM: 8x8 simdgroup_multiply_accumulate over 32-lane simdgroups, "
                          "threadgroup-memory staging, fp32 accumulation, fused epilogue"}),
)
