"""The stem core: NHWC conv of fewer than 16 input channels (an image network's first layer),
``emitters/cuda/stem.py`` and ``stem_kernel.py``: r*s*c packed densely, the filter resident in shared memory,
input rows copied once, A gathered from them. An alternate: the hero of both 16-bit conv families."""

from __future__ import annotations

from .. import stem, stem_kernel
from ..core import CudaCore, cuda_kernel

ORDER = 70  # the registry's order

CORES = (
    CudaCore(name="stem", family="", ops=("conv2d",), schedule=stem.StemSchedule, hero=stem.hero_schedule,
             space=stem.search_space, check=stem.check, render=stem_kernel.render, kernel=cuda_kernel,
             serves=("cuda-mma-sync.conv2d", "cuda-wgmma.conv2d"), prefers=stem.prefers, applies=stem.applies),
)
