"""The CUDA emitter and runtime: CUDA C++ rendered from the C-style base, compiled at run time by NVRTC
through cuda-core into a content-hash cache, loaded and launched through cuda-core, timed with CUDA
events. No nvcc is needed, and no GPU to compile (``emit(..., arch="sm_90a")``).

    from tracea.emitters import cuda
    v = cuda.resolve("cuda-mma-sync.gemm")
    kernel = cuda.build(op, v, cuda.hero_schedule(op, v, host), host)
    out = kernel(op.random_inputs(rng), np.empty(op.output_shape(), op.dtype.storage))

Importing this package is light (no NumPy, no cuda-core): both load on first use of ``build``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .build import build, emit, hero_schedule, search_space
from .schedule import CudaSchedule
from .variants import ALL_VARIANTS, VARIANTS, resolve

if TYPE_CHECKING:
    from .runtime import Artifact, CudaKernel

__all__ = ["VARIANTS", "ALL_VARIANTS", "CudaSchedule", "CudaKernel", "Artifact", "build", "emit", "hero_schedule",
           "resolve", "search_space"]


def __getattr__(name: str) -> Any:
    if name in ("CudaKernel", "Artifact"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
