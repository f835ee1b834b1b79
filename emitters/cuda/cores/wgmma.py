"""The Hopper (sm_90a) GEMM and convolution cores, composed in ``emitters/cuda/hopper/`` (schedule,
mainloop, scheduler, epilogue; gemm.py and conv.py over them); ``tma.py`` holds their checks and the GEMM's
kernel object. Each needs its hero's opt-in shared memory (the Hopper GEMM and conv tests check that the
two agree)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import mma, tma
from ..core import CudaCore
from ..hopper import conv as hopper_conv
from ..hopper import conv_heroes as hopper_conv_heroes
from ..hopper import conv_schedule as hopper_conv_schedule
from ..hopper import gemm as hopper_gemm
from ..hopper import gemm_heroes as hopper_gemm_heroes
from ..hopper import schedule as hopper_schedule
from ..hopper import space as hopper_space

ORDER = 50  # the registry's order, and its variants'


def hopper(kind: str, schedule_class: type, hero: Callable[..., Any], space: Callable[..., Any],
           rendered: Callable[..., Any], kernel: Callable[..., Any],
           scalars: Callable[[Any, Any], dict[str, float | int]], smem: int, description: str) -> CudaCore:
    """A Hopper core: its schedule class and hero (hopper/schedule.py), its space (hopper/space.py), and its
    kernel module's ``rendered(op, schedule, sm_count)``; its variant bf16/fp16, verified on a GPU."""
    return CudaCore(
        name="wgmma", family="cuda-wgmma", ops=(kind,), schedule=schedule_class,
        hero=lambda op, host: hero(op, mma.sm_count(host)),
        space=lambda op, _hero, arch: space(op, arch.smem_optin, arch.sm_count if arch.sm_count > 1 else 132),
        check=tma.check_wgmma, render=lambda op, s, arch: (rendered(op, s, arch.sm_count), scalars(op, s)),
        kernel=kernel, precisions=("bf16", "fp16"), smem=smem, descriptions={kind: description}, verified=True)


CORES = (
    # hopper/gemm.py, tma.py (issue 5): the heroes' largest ring (gemm_heroes.largest_smem: 230512 B); verified on an
    # H200 (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma/, docs/hopper.md)
    hopper("gemm", hopper_schedule.WgmmaSchedule, hopper_gemm_heroes.gemm_hero_schedule, hopper_space.search_space,
           hopper_gemm.rendered, tma.WgmmaKernel, lambda op, _s: {"M": op.m, "N": op.n, "K": op.k, "alpha": op.alpha},
           hopper_gemm_heroes.largest_smem(), "Hopper GEMM: TMA into 128B-swizzled shared memory, wgmma.mma_async on warpgroups, "
                   "producer/consumer warp specialisation over an mbarrier ring, setmaxnreg, "
                   "persistent L2-grouped tile order, fused epilogue, fp32 accumulation"),
    # hopper/conv.py: the GEMM's parts with a producer warpgroup that gathers the activations by cp.async
    # (NHWC; NCHW through transposes inside the call); its larger hero's 230512 B (128x128 ping-pong,
    # 6 stages); verified on an H200 (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma_conv/)
    hopper("conv2d", hopper_conv_schedule.WgmmaConvSchedule, hopper_conv_heroes.conv_hero_schedule,
           hopper_space.conv_search_space, hopper_conv.rendered, hopper_conv.conv_kernel,
           lambda op, s: dict(hopper_conv.conv_scalars(op, s.chunk)),
           230512, "Hopper implicit-GEMM convolution (NHWC; NCHW via transposes): filter by TMA, "
                   "activations gathered by a cp.async producer warpgroup into 128B-swizzled shared memory "
                   "(zero fill for padding), wgmma.mma_async consumers, mbarrier ring, persistent tiles, bias"),
)
