"""The Metal convolution's core: implicit-GEMM NHWC convolution on the simdgroup GEMM body
(``emitters/metal/gemm.py``)."""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import UnsupportedError

from .. import gemm as g
from ..core import Launch, MetalCore
from .gemm import schedule_check

ORDER = 20  # the registry's order, and its variants'


def conv_check(op: Any) -> None:
    g.check_dtype(op)
    if op.layout != "nhwc" or op.groups != 1:
        raise UnsupportedError("the Metal conv computes NHWC convolutions with groups 1",
                               "--layout nhwc; grouped convolutions run on another backend")
    g.check_elements("the input", op.n, op.h, op.w, op.c)
    g.check_elements("the filter", op.k, op.r, op.s, op.c)
    g.check_elements("the output", op.gemm_m, op.gemm_n)
    g.check_dims(**{"N*P*Q (the GEMM's M)": op.gemm_m, "R*S*C (its K)": op.gemm_k})
    (sh, sw), (ph, pw), (dh, dw) = op.stride, op.padding, op.dilation  # the kernel's coordinates are 32-bit ints
    g.check_dims(**{"the input row (P-1)*stride + (R-1)*dilation + padding": (op.p - 1) * sh + (op.r - 1) * dh + ph,
                    "the input column (Q-1)*stride + (S-1)*dilation + padding": (op.q - 1) * sw + (op.s - 1) * dw + pw})


def conv_launch(op: Any, schedule: g.MetalGemmSchedule) -> Launch:
    """The kernel and its arguments: the input, the filter, the bias where the op has one, the output, then
    the shape (N = the filter's K)."""
    dtype = op.dtype.value
    src = g.render(dtype, schedule, "conv", ("bias",) if op.bias else ())
    ints = (op.n, op.h, op.w, op.c, op.p, op.q, op.k, op.r, op.s, *op.stride, *op.padding, *op.dilation)
    args = (("in", "x"), ("in", "weight"), *((("in", "bias"),) if op.bias else ()), ("out", None),
            *(("i32", v) for v in ints))
    return Launch(g.CONV_KERNEL, src, g.grid(op.gemm_m, op.gemm_n, schedule), (schedule.threads, 1, 1), args,
                  schedule.threadgroup_bytes(dtype))


CORES = (
    MetalCore(name="conv2d", ops=("conv2d",), family="metal-simdgroup", schedule=g.MetalGemmSchedule,
              check_op=conv_check, hero=lambda op, cores: g.tiled_hero(op.gemm_m, op.gemm_n, op.dtype.value, cores),
              space=g.tiled_space, check=schedule_check, render=conv_launch,
              descriptions={"conv2d": "implicit-GEMM NHWC convolution on the simdgroup-matrix GEMM's body"}),
)
