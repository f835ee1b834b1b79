"""The CPU softmax's core: ``emitters/cpu/softmax.py``."""

from __future__ import annotations

from .. import softmax
from ..core import CpuCore
from ..schedules import rows_space

ORDER = 30  # the registry's order, and its variants'

CORES = (CpuCore(name="softmax", ops=("softmax",), space=rows_space, render=softmax.render_softmax,
                 entry=softmax.ENTRY, buffers=("x", "out"), arguments=softmax.core_arguments, tag=lambda op: "rows",
                 shape_free=("dtype",), metadata=softmax.core_metadata,
                 descriptions={"softmax": "vectorised, numerically stable row softmax"}),)
