"""``tracea.ops.attention``'s PyTorch pieces: the ``torch.compile`` backend's custom op (declared with
``F.scaled_dot_product_attention`` beside it) and how it finds SDPA calls in a graph (``MATCHES``). Importing
this module imports torch."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from .._functions import attention
from .._torch_args import Match, arg, dense, laid
from ..compile_choice import custom_op

ORDER = 40  # its place among the torch pieces (the compile backend's matches)

@custom_op("attention", lambda q, k, v, causal, scale, gqa: F.scaled_dot_product_attention(
    q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa))
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None,
               gqa: bool = False) -> torch.Tensor:
    """SDPA's meaning; ``gqa``: its ``enable_gqa`` (q head h reads kv head h // (H / Hkv), as Tracea's op
    does); without it, kv heads other than q's run torch's op, which refuses them as SDPA does."""
    # torch aligns is_causal top-left, Tracea bottom-right: they agree only when Sq == Sk.
    if q.dim() != 4 or (causal and q.shape[-2] != k.shape[-2]) or k.shape != v.shape or q.shape[-1] != v.shape[-1] \
            or (not gqa and q.shape[1] != k.shape[1]) or q.shape[0] != k.shape[0]:  # SDPA broadcasts a batch of 1
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa).contiguous()
    return laid(attention(dense(q), dense(k), dense(v), causal=causal, scale=scale), False)


@_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None,
      gqa: bool = False) -> torch.Tensor:
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


def _sdpa_args(node: fx.Node) -> tuple[Any, ...] | None:
    q, k, v = (arg(node, i, n, None) for i, n in enumerate(("query", "key", "value")))
    if arg(node, 3, "attn_mask", None) is not None or arg(node, 4, "dropout_p", 0.0) not in (0, 0.0):
        return None
    causal, scale, gqa = arg(node, 5, "is_causal", False), node.kwargs.get("scale"), node.kwargs.get("enable_gqa", False)
    if not isinstance(causal, bool) or not isinstance(gqa, bool) or not isinstance(scale, (float, type(None))):
        return None
    return q, k, v, causal, scale, gqa



MATCHES = (Match("attention", (F.scaled_dot_product_attention,), _sdpa_args),)
PIECES: dict[str, Any] = {}  # no nn.Module stands in for it
FORWARDS: tuple[Any, ...] = ()
