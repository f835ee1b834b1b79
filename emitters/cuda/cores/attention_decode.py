"""The decode attention core: flash-decoding for at most 16 queries (``emitters/cuda/attention_decode.py``,
``attention_decode_kernel.py``; issue 33): the rows of a kv head's query heads packed in one tile, the keys
split over blocks and warps, the partials merged in a fixed order. An alternate: the hero of both CUDA
attention families for short queries."""

from __future__ import annotations

from .. import attention_decode
from ..core import CudaCore

ORDER = 90  # the registry's order

CORES = (
    CudaCore(name="attention-decode", family="", ops=("attention",), schedule=attention_decode.AttentionDecodeSchedule,
             hero=attention_decode.hero_schedule, space=attention_decode.search_space, check=attention_decode.check,
             render=attention_decode.render, kernel=attention_decode.decode_kernel,
             serves=("cuda-mma-sync.attention", "cuda-wgmma.attention"), prefers=attention_decode.prefers,
             applies=attention_decode.applies, serving=True),
)
