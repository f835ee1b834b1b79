"""What the PyTorch pieces of ``tracea.ops`` share (``_torch/``, one file per op): dense views of tensors,
the memory format a custom op promises, the arguments of an FX node, and ``Match``, the line by which the
``torch.compile`` backend (compile_backend.py) finds an op's torch calls in a graph. Importing this module
imports torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx


@dataclass(frozen=True)
class Match:
    """How the ``torch.compile`` backend finds one Tracea custom op's torch calls in an FX graph: ``kind`` (the
    custom op's name, ``torch.ops.tracea.<kind>``), ``targets`` (the functions and method names a call node
    holds), ``args(node)`` (the custom op's arguments, or None when the call has options the op does not take),
    and for an ``nn.Module`` call node ``module`` (its class) with ``module_args(gm, node)``."""

    kind: str
    targets: tuple[Any, ...] = ()
    args: Callable[[fx.Node], tuple[Any, ...] | None] | None = None
    module: type | None = None
    module_args: Callable[[fx.GraphModule, fx.Node], tuple[Any, ...] | None] | None = None

    @property
    def custom(self) -> Any:
        return getattr(torch.ops.tracea, self.kind).default


def dense(t: torch.Tensor) -> torch.Tensor:
    return t.detach() if t.is_contiguous() else t.detach().contiguous()


def channels_last(x: torch.Tensor) -> bool:
    """A 4-D tensor dense in channels_last memory and not also plain contiguous (what the conv reads in place)."""
    return x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def dense4(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the conv reads it: channels_last kept, anything else made contiguous."""
    return t.detach() if channels_last(t) else dense(t)


def laid(y: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """``y`` in the memory format the op's fake promised (a fallback may return another)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return y if y.is_contiguous(memory_format=fmt) and (channels_last or y.is_contiguous()) else \
        y.contiguous(memory_format=fmt)


def int_pair(v: Any) -> list[int] | None:
    if isinstance(v, int):
        return [v, v]
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return list(v)
    return None


def arg(node: fx.Node, i: int, name: str, default: Any) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


