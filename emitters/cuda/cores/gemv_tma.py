"""The gemv_tma core: the decode GEMM (at most 16 rows) with B streamed by TMA through a shared-memory ring,
``emitters/cuda/gemv_tma.py``. An alternate of the Hopper family: its hero for such shapes where TMA can
address the operands (the register gemv otherwise)."""

from __future__ import annotations

from .. import gemv_tma
from ..core import CudaCore

ORDER = 79  # the registry's order: before gemv, so that it is the first alternate the Hopper family asks

CORES = (
    CudaCore(name="gemv_tma", family="", ops=("gemm", "scaled_gemm"), schedule=gemv_tma.GemvTmaSchedule,
             hero=gemv_tma.hero_schedule, space=gemv_tma.search_space, check=gemv_tma.check,
             render=gemv_tma.render, kernel=gemv_tma.gemv_tma_kernel, serves=("cuda-wgmma",),
             prefers=gemv_tma.prefers, applies=gemv_tma.applies),
)
