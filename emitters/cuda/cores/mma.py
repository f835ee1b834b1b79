"""The mma.sync core (sm_80+): GEMM and implicit-GEMM convolution, ``emitters/cuda/mma.py``.

A tiled core's shared memory is its largest hero's: 256x128x32 with 4 stages. Verified on odd shapes on an
NVIDIA H200 (docs/device-runs/h200-cuda-kernels-and-tuner/cuda/smoke-verify,
docs/device-runs/h200-cuda-kernels-and-tuner/cuda/full-checks-memcheck-api-reports)."""

from __future__ import annotations

from typing import Any

from .. import mma, stem
from ..core import CudaCore, cuda_kernel, tiled_check
from ..schedule import CudaSchedule

ORDER = 10  # the registry's order, and its variants'


def small_channel_conv(op: Any) -> bool:
    """A convolution with fewer than 16 input channels (an image network's stem) that the stem core does
    not take (NCHW, grouped): the mma core's, packing r*s*c as one reduction dimension too."""
    if getattr(op, "kind", None) != "conv2d" or op.c >= 16:
        return False
    return not stem.applies(op)


CORES = (
    # Also the Hopper conv's hero for fewer than 16 input channels where the stem core does not run (NCHW):
    # mma.sync reduces over r*s*c packed as one dimension, the Hopper gather pads each tap's c to 8 (an
    # H100, ResNet-50's stem at batch 32: 0.32 ms against 2.29 ms; docs/device-runs/h100-cuda-suites-splitk-im2col-stem/variant-probe/)
    CudaCore(name="mma", family="cuda-mma-sync", ops=("gemm", "conv2d"), schedule=CudaSchedule,
             hero=mma.hero_schedule, space=mma.search_space, check=tiled_check("mma"), render=mma.render,
             kernel=cuda_kernel, serves=("cuda-wgmma.conv2d",), prefers=small_channel_conv,
             precisions=("bf16", "fp16"), smem=98304, verified=True, descriptions={
                 "gemm": "tensor-core GEMM: mma.sync m16n8k16 fed by ldmatrix, multi-stage cp.async pipeline, "
                         "swizzled shared memory, fused epilogue, fp32 accumulation",
                 "conv2d": "implicit-GEMM convolution on the mma.sync core (NCHW/NHWC, magic-number division, "
                           "hoisted coordinate table)"}),
)
