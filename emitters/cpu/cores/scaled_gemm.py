"""The CPU scaled 8-bit GEMM's core: ``emitters/cpu/scaled_gemm.py`` (its own ``ScaledGemmSchedule``)."""

from __future__ import annotations

from .. import scaled_gemm
from ..core import CpuCore

ORDER = 15  # the registry's order, and its variants'

CORES = (CpuCore(name="scaled_gemm", ops=("scaled_gemm",), schedule=scaled_gemm.ScaledGemmSchedule,
                 hero=scaled_gemm.hero_schedule, space=scaled_gemm.schedule_space, check=scaled_gemm.core_check,
                 render=scaled_gemm.render_scaled_gemm, entry=scaled_gemm.ENTRY, buffers=scaled_gemm.BUFFERS,
                 arguments=scaled_gemm.core_arguments, tag=scaled_gemm.core_tag,
                 shape_free=("dtype", "out_dtype", "scale", "layout_b"), metadata=scaled_gemm.core_metadata,
                 precisions=("int8",), flags=scaled_gemm.core_flags,
                 descriptions={"scaled_gemm": "int8 GEMM with scales (dot products along K reading B in place at small M; "
                                              "packed panels from 32 rows; AMX tiles over them on Xeons with AMX-INT8)"}),)
