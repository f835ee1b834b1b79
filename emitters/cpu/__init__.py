"""The CPU emitter and runtime: C with SIMD intrinsics (AVX-512, AVX2+FMA, NEON, portable C) rendered
from one C-style base, compiled with the host compiler into a content-hash cache and called through
ctypes on NumPy arrays.

    from tracea.emitters import cpu
    v = cpu.resolve("cpu-avx512.gemm")
    kernel = cpu.build(op, v, cpu.hero_schedule(op, v, host), host)
    out = kernel(op.random_inputs(rng))

Importing this package is light (no NumPy): the runtime loads on first use of ``build``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .build import build, emit, hero_schedule
from .schedule import CpuSchedule
from .space import search_space
from .suite import suites
from .variants import ALL_VARIANTS, VARIANTS, resolve

if TYPE_CHECKING:
    from ..artifact import Artifact
    from .runtime import CpuKernel

__all__ = ["VARIANTS", "ALL_VARIANTS", "CpuSchedule", "CpuKernel", "Artifact", "build", "emit", "hero_schedule",
           "resolve", "suites", "search_space"]


def __getattr__(name: str) -> Any:
    if name in ("CpuKernel", "Artifact"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(name)
