"""The CPU attention's core: ``emitters/cpu/attention.py`` (its own ``AttentionSchedule``)."""

from __future__ import annotations

from .. import attention
from ..core import CpuCore

ORDER = 40  # the registry's order, and its variants'

CORES = (CpuCore(name="attention", ops=("attention",), schedule=attention.AttentionSchedule,
                 hero=attention.hero_schedule, space=attention.attention_space, check=attention.core_check,
                 render=attention.render_attention, kernel=attention.core_kernel, entry=attention.ENTRY,
                 buffers=attention.BUFFERS, arguments=attention.core_arguments, tag=attention.core_tag,
                 shape_free=("dtype", "head_dim"), metadata=attention.core_metadata, serving=True, packed=True,
                 descriptions={"attention": "FlashAttention-style forward (K/V blocks streamed, online softmax, "
                                            "masked blocks skipped)"}),)
