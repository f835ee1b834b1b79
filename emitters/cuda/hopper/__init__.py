"""The Hopper (sm_90a) kernels, in the parts CUTLASS 3 composes a kernel from:

- ``schedule.py``: ``WgmmaSchedule`` (checks, JSON, the hero), the constants; ``conv_schedule.py``
  ``WgmmaConvSchedule``;
  ``gemm_heroes.py`` the GEMM core's hero (one-wave tiles for 33-512 rows), ``conv_heroes.py`` the conv's.
- ``space.py``: their search spaces (split-K and cluster variants; the conv's paths).
- ``mainloop.py``: the producer warpgroup (TMA loads, or the conv's cp.async gather) and the consumer
  warpgroups (wgmma on swizzled-layout descriptors) around the mbarrier ring.
- ``ptx.py``: the PTX wrappers every kernel calls (mbarrier, TMA, wgmma), and the TMA probe kernel.
- ``scheduler.py``: the tile scheduler (``TileScheduler``: the persistent walk and split-K's, ``splitk.py``,
  with its fix-up; launch geometry; where stream-K goes) over the tile geometry of ``tiles.py``.
- ``epilogue.py``: fused element-wise ops, then TMA store or direct stores, and the drain.
- ``gemm.py`` and ``conv.py``: thin kernels over those (source, launch, metadata; the conv's host side):
  each joins its parts, handing the mainloop its ``TileScheduler`` and its ``epilogue.Stores``.

The GEMM's names are exported here (the host side in ``..tma`` and the GPU scripts read them); the conv
is ``hopper.conv``, imported on its own (its host side imports ``..tma``, which imports this package).
"""

from .conv_heroes import conv_hero_schedule
from .conv_schedule import WgmmaConvSchedule
from .gemm import KERNEL_NAME, launch_geometry, render, rendered, tma_boxes, tma_unsupported
from .gemm_heroes import gemm_hero_schedule
from .mainloop import descriptor_strides, operand_layouts
from .ptx import render_tma_probe
from .schedule import (
    BK,
    HERO,
    SMEM_OPTIN_SM90,
    SWIZZLE,
    WgmmaSchedule,
    hero_schedule,
)
from .space import conv_search_space, search_space

__all__ = ["BK", "HERO", "KERNEL_NAME", "SMEM_OPTIN_SM90", "SWIZZLE", "WgmmaConvSchedule", "WgmmaSchedule",
           "conv_hero_schedule", "conv_search_space", "descriptor_strides", "gemm_hero_schedule", "hero_schedule",
           "launch_geometry",
           "operand_layouts", "render", "render_tma_probe", "rendered", "search_space", "tma_boxes",
           "tma_unsupported"]
