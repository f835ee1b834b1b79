"""The HIP convolution's core: implicit-GEMM NHWC convolution on the MFMA GEMM body (``emitters/hip/gemm.py``)."""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import UnsupportedError

from .. import gemm as g
from ..core import HipCore, Launch, mfma_dtype, operand, schedule_check, tiled_hero, tiled_space

ORDER = 20  # the registry's order, and its variants'


def conv_check(op: Any) -> None:
    mfma_dtype(op)
    if op.layout != "nhwc" or op.groups != 1:
        raise UnsupportedError("the HIP conv computes NHWC convolutions with groups 1",
                               "--layout nhwc; grouped convolutions run on another backend")


def conv_launch(op: Any, schedule: Any, target: str) -> Launch:
    dtype, needs = op.dtype.value, tuple(op.shapes())
    smem = schedule.lds_bytes(dtype) if target == "nvidia" else 0
    src = g.render(dtype, schedule, target, "conv", ("bias",) if op.bias else ())
    ints = (op.n, op.h, op.w, op.c, op.p, op.q, op.k, op.r, op.s, *op.stride, *op.padding, *op.dilation)
    args = (("in", "x"), ("in", "weight"), ("out", None), operand(needs, "bias"), *(("i32", v) for v in ints))
    return Launch(g.CONV_KERNEL, src, g.grid(op.gemm_m, op.gemm_n, schedule), (schedule.threads, 1, 1), args,
                  smem)


CORES = (
    HipCore(name="conv2d", ops=("conv2d",), family="hip-mfma", schedule=g.HipGemmSchedule, check_op=conv_check,
            hero=lambda op, cus: tiled_hero(op.gemm_m, op.gemm_n, op.dtype.value, cus), space=tiled_space,
            check=schedule_check, render=conv_launch,
            descriptions={"conv2d": "implicit-GEMM NHWC convolution on the Matrix Core GEMM's body"}),
)
