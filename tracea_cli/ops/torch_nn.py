"""The PyTorch pieces of ``tracea.ops``: ``TraceaConv2d`` (an ``nn.Conv2d`` whose forward runs
``tracea.ops.conv2d``) and ``patch_conv2d`` / ``unpatch_conv2d``. Importing this module imports torch.

Two ways to patch, both reversible and idempotent:
- ``patch_conv2d(model)``: every ``nn.Conv2d`` (exactly that class) inside ``model`` becomes a ``TraceaConv2d``
  in place (its ``__class__``; parameters, buffers, hooks and ``state_dict`` untouched);
  ``unpatch_conv2d(model)`` turns them back.
- ``patch_conv2d()``: ``torch.nn.Conv2d.forward`` itself is replaced, for every model in the process,
  until ``unpatch_conv2d()``.

Where the kernel path does not apply (autograd: a parameter or input that requires grad with grad mode
on; ``padding_mode`` other than "zeros"; an unbatched 3-D input; anything ``tracea.ops.conv2d`` falls back
on), the forward is PyTorch's own, and ``tracea.ops.explain(layer, x)`` says why.
"""

from __future__ import annotations

from typing import Any

import torch

from tracea.doctor.errors import BadInputError, UnsupportedError

from . import _dispatch, _engine
from ._arrays import is_torch
from ._engine import STATS, Route
from ._functions import conv2d

_TORCH_FORWARD = torch.nn.Conv2d.forward  # PyTorch's own, captured before any patch
_PATCHED: dict[str, Any] = {}


def _module(fn: str, model: Any) -> None:
    if model is not None and not isinstance(model, torch.nn.Module):
        raise BadInputError(f"{fn}: expected a torch.nn.Module or nothing, got {type(model).__name__}",
                            f"{fn}(model) patches that model's layers, {fn}() the whole process")


def _own_reason(layer: torch.nn.Conv2d, x: Any) -> str | None:
    if layer.padding_mode != "zeros":
        return f"padding_mode={layer.padding_mode!r} (the kernels pad with zeros)"
    if is_torch(x) and x.dim() == 3:  # other ranks are refused by tracea.ops.conv2d, as nn.Conv2d refuses them
        return "a 3-D (unbatched) input; the kernels take N x C x H x W"
    return None


def _forward(self: torch.nn.Conv2d, input: Any) -> Any:  # noqa: A002 - nn.Conv2d's own argument name
    reason = _own_reason(self, input)
    if reason is None:
        return conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
    route = Route(op="conv2d", path="fallback", reason=reason, vendor="torch.nn.Conv2d.forward")
    _dispatch._LAST.route = route
    if _dispatch.EXPLAINING.get():
        return route
    if not _engine.fallback_allowed():
        raise UnsupportedError(f"TraceaConv2d: {reason}", "tracea.ops.allow_fallback(True) runs PyTorch's forward")
    STATS["fallbacks"] += 1
    return _TORCH_FORWARD(self, input)


class TraceaConv2d(torch.nn.Conv2d):
    """A drop-in ``nn.Conv2d``: same constructor, parameters and ``state_dict``; forward through
    ``tracea.ops.conv2d`` (PyTorch's forward where the kernel path does not apply, see the module docstring)."""

    forward = _forward

    @classmethod
    def from_conv(cls, conv: torch.nn.Conv2d) -> TraceaConv2d:
        """``conv`` itself, now a TraceaConv2d (in place, as ``patch_conv2d(model)`` does)."""
        if type(conv) is torch.nn.Conv2d:
            conv.__class__ = cls
        elif not isinstance(conv, cls):
            raise UnsupportedError(f"from_conv: {type(conv).__name__} is not a plain nn.Conv2d",
                                   "subclasses keep their own forward; construct a TraceaConv2d instead")
        return conv  # type: ignore[return-value]


def patch_conv2d(model: torch.nn.Module | None = None) -> int:
    """Route ``nn.Conv2d`` forwards through Tracea: in ``model`` (its plain ``nn.Conv2d`` layers become
    ``TraceaConv2d``; returns how many), or, without a model, process-wide (returns 1 when this call patched,
    0 when it already was)."""
    _module("patch_conv2d", model)
    if model is None:
        if "forward" in _PATCHED:
            return 0
        _PATCHED["forward"] = torch.nn.Conv2d.forward
        torch.nn.Conv2d.forward = _forward
        return 1
    count = 0
    for mod in model.modules():
        if type(mod) is torch.nn.Conv2d:
            mod.__class__ = TraceaConv2d
            count += 1
    return count


def unpatch_conv2d(model: torch.nn.Module | None = None) -> int:
    """Undo ``patch_conv2d`` (in ``model``, or process-wide); returns how many it turned back."""
    _module("unpatch_conv2d", model)
    if model is None:
        original = _PATCHED.pop("forward", None)
        if original is None:
            return 0
        torch.nn.Conv2d.forward = original
        return 1
    count = 0
    for mod in model.modules():
        if type(mod) is TraceaConv2d:
            mod.__class__ = torch.nn.Conv2d
            count += 1
    return count
