"""The CPU GEMM's core: the BLIS-style kernel of ``emitters/cpu/gemm.py`` (small M: ``gemv.py``)."""

from __future__ import annotations

from .. import gemm
from ..core import CpuCore

ORDER = 10  # the registry's order, and its variants'

CORES = (CpuCore(name="gemm", ops=("gemm",), hero=gemm.core_hero, space=gemm.core_space, render=gemm.render_gemm,
                 entry=gemm.ENTRY, buffers=("a", "b", "out", "bias", "residual"), arguments=gemm.core_arguments,
                 tag=gemm.core_tag, shape_free=("dtype", "layout_a", "layout_b", "epilogue"),
                 metadata=gemm.core_metadata,
                 descriptions={"gemm": "BLIS-style GEMM (packed panels, cache blocks, threads, fused epilogue)"}),)
