"""The CPU convolution's core: ``emitters/cpu/conv.py`` on the GEMM micro-kernel (a direct form in
``conv_direct.py``, a small-M form in ``conv_small.py``)."""

from __future__ import annotations

from .. import conv
from ..core import CpuCore

ORDER = 20  # the registry's order, and its variants'

CORES = (CpuCore(name="conv2d", ops=("conv2d",), hero=conv.core_hero, space=conv.core_space, check=conv.core_check,
                 render=conv.render_conv, entry=conv.ENTRY, buffers=("x", "weight", "out", "bias"),
                 arguments=conv.core_arguments, tag=conv.core_tag, shape_free=("dtype", "layout", "bias"),
                 metadata=conv.core_metadata,
                 descriptions={"conv2d": "implicit-GEMM convolution on the GEMM micro-kernel (patches gathered "
                                         "while packing)"}),)
