"""The softmax core: ``emitters/cuda/softmax.py`` (a block per row), ``softmax_rows.py`` (several rows per
block), ``softmax_split.py`` (one long row over several blocks). It needs only its static reduction arrays
of shared memory. Verified on odd shapes on an NVIDIA H200 (as the mma core, ``mma.py`` here)."""

from __future__ import annotations

from .. import softmax, softmax_split
from ..core import CudaCore, tiled_check
from ..schedule import CudaSchedule

ORDER = 30  # the registry's order, and its variants'

CORES = (
    CudaCore(name="softmax", family="cuda-simt", ops=("softmax",), schedule=CudaSchedule,
             hero=softmax.hero_schedule, space=softmax.search_space, check=tiled_check("softmax"),
             render=softmax.render, kernel=softmax_split.split_kernel, precisions=("fp32", "fp16", "bf16"),
             verified=True, descriptions={"softmax": "row softmax: one kernel, online max and sum, vectorised, "
                                                     "one pass when the row fits in registers"}),
)
