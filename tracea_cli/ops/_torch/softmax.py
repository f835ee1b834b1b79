"""``tracea.ops.softmax``'s PyTorch pieces: the ``torch.compile`` backend's custom op (declared with
``torch.softmax`` beside it) and how it finds softmax calls in a graph (``MATCHES``). Importing this module
imports torch."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from .._functions import softmax
from .._torch_args import Match, arg, dense
from ..compile_choice import custom_op

ORDER = 30  # its place among the torch pieces (the compile backend's matches)

@custom_op("softmax", torch.softmax)
def _softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return softmax(dense(x), dim)


@_softmax.register_fake
def _(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_args(node: fx.Node) -> tuple[Any, ...] | None:
    dim = arg(node, 1, "dim", None)
    if not isinstance(dim, int) or arg(node, 2, "dtype", None) is not None or node.kwargs.get("_stacklevel"):
        return None
    return node.args[0], dim



MATCHES = (Match("softmax", (torch.softmax, F.softmax, torch.Tensor.softmax, "softmax"), _softmax_args),)
PIECES: dict[str, Any] = {}  # no nn.Module stands in for it
FORWARDS: tuple[Any, ...] = ()
