"""The SIMT core: fp32 GEMM and convolution on CUDA cores, ``emitters/cuda/simt.py``. Its shared memory is
its largest hero's: 128x128x16 double-buffered fp32 tiles. Verified on odd shapes on an NVIDIA H200 (as the
mma core, ``mma.py`` here)."""

from __future__ import annotations

from .. import simt
from ..core import CudaCore, cuda_kernel, tiled_check
from ..schedule import CudaSchedule

ORDER = 20  # the registry's order, and its variants'

CORES = (
    CudaCore(name="simt", family="cuda-simt", ops=("gemm", "conv2d"), schedule=CudaSchedule,
             hero=simt.hero_schedule, space=simt.search_space, check=tiled_check("simt"), render=simt.render,
             kernel=cuda_kernel, precisions=("fp32",), smem=33792, verified=True, descriptions={
                 "gemm": "warp-tiled fp32 GEMM on CUDA cores (8x8 per thread, double-buffered shared tiles)",
                 "conv2d": "implicit-GEMM fp32 convolution on the SIMT core"}),
)
