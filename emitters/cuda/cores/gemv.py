"""The gemv core: GEMM of at most 16 rows (decode), memory bound, ``emitters/cuda/gemv.py``. An alternate:
the hero of the tensor-core GEMM families for such shapes."""

from __future__ import annotations

from .. import gemv
from ..core import CudaCore

ORDER = 80  # the registry's order

CORES = (
    CudaCore(name="gemv", family="", ops=("gemm",), schedule=gemv.GemvSchedule, hero=gemv.hero_schedule,
             space=gemv.search_space, check=gemv.check, render=gemv.render, kernel=gemv.gemv_kernel,
             serves=("cuda-mma-sync", "cuda-wgmma"), prefers=gemv.prefers, applies=gemv.applies),
)
