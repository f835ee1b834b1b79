"""The CUDA emitter and runtime: CUDA C++ rendered from the C-style base, compiled at run time by NVRTC
through cuda-core into a content-hash cache, loaded and launched through cuda-core, timed with CUDA
events. No nvcc is needed, and no GPU to compile (``emit(..., arch="sm_90a")``).

    from tracea.emitters import cuda
    v = cuda.resolve("cuda-mma-sync.gemm")
    kernel = cuda.build(op, v, cuda.hero_schedule(op, v, host), host)
    out = kernel(op.random_inputs(rng), np.empty(op.output_shape(), op.output_dtype.storage))

Importing this package is light (no NumPy, no cuda-core): both load on first use of ``build``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .build import (
    build,
    emit,
    hero_schedule,
    schedule_from_json,
    search_space,
    tuning_features,
    validate_schedule,
)
from .schedule import CudaSchedule
from .suite import suites
from .variants import ALL_VARIANTS, VARIANTS, resolve

if TYPE_CHECKING:
    from ..artifact import Artifact
    from .runtime import CudaKernel

__all__ = ["VARIANTS", "ALL_VARIANTS", "CudaSchedule", "CudaKernel", "Artifact", "bank_conflict_drop", "build", "emit", "hero_schedule",
           "resolve", "suites", "schedule_from_json", "search_space", "tuning_features", "validate_schedule"]


def bank_conflict_drop(op: Any, variant: Any, schedule: Any) -> str | None:
    """The tuner's bank-conflict pruning hook (smem.bank_conflict_drop; imports NumPy on use)."""
    from .smem import bank_conflict_drop as drop

    return drop(op, variant, schedule)


def __getattr__(name: str) -> Any:
    if name in ("CudaKernel", "Artifact"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
