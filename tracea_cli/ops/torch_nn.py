"""How ``tracea.ops`` stands in for a PyTorch ``nn.Module``: the patching every op's module pieces share
(``_torch/<op>.py``: ``TraceaConv2d`` and ``patch_conv2d`` / ``unpatch_conv2d`` in ``_torch/conv2d.py``,
``TraceaLinear`` and ``patch_linear`` / ``unpatch_linear`` in ``_torch/gemm.py``). Importing this module
imports torch.

Two ways to patch, both reversible and idempotent:
- ``patch_conv2d(model)``: every ``nn.Conv2d`` (exactly that class) inside ``model`` becomes a ``TraceaConv2d``
  in place (its ``__class__``; parameters, buffers, hooks and ``state_dict`` untouched);
  ``unpatch_conv2d(model)`` turns them back. On GPU weights in NCHW memory it says once what that costs
  (Tracea's Hopper convolutions read NHWC: x, the filter and the result are transposed at every call) and
  the fix; ``patch_conv2d(model, channels_last=True)`` applies it (``model.to(memory_format=channels_last)``).
- ``patch_conv2d()``: ``torch.nn.Conv2d.forward`` itself is replaced, for every model in the process,
  until ``unpatch_conv2d()``. ``patch_linear`` works the same way for ``nn.Linear``.

Where the kernel path does not apply (autograd: a parameter or input that requires grad with grad mode
on; ``padding_mode`` other than "zeros"; an unbatched 3-D input; anything ``tracea.ops.conv2d`` falls back
on), the forward is PyTorch's own, and ``tracea.ops.explain(layer, x)`` says why.
"""

from __future__ import annotations

from typing import Any

import torch

from tracea.doctor.errors import BadInputError, UnsupportedError

from . import _dispatch, _engine
from ._engine import STATS, Route

_PATCHED: dict[type, Any] = {}  # nn class -> its forward before a process-wide patch


def check_module(fn: str, model: Any) -> None:
    if model is not None and not isinstance(model, torch.nn.Module):
        raise BadInputError(f"{fn}: expected a torch.nn.Module or nothing, got {type(model).__name__}",
                            f"{fn}(model) patches that model's layers, {fn}() the whole process")


def torchs_forward(op: str, layer: Any, input: Any, reason: str, base: type, forward: Any) -> Any:  # noqa: A002
    """A patched layer's forward where the kernel path does not apply: PyTorch's own (``forward``, captured
    before any patch), the route recorded for ``explain``; or, under ``allow_fallback(False)``, the reason."""
    route = Route(op=op, path="fallback", reason=reason, vendor=f"torch.nn.{base.__name__}.forward")
    _dispatch._LAST.route = route
    if _dispatch.EXPLAINING.get():
        return route
    if not _engine.fallback_allowed():
        raise UnsupportedError(f"Tracea{base.__name__}: {reason}", "tracea.ops.allow_fallback(True) runs PyTorch's forward")
    STATS["fallbacks"] += 1
    return forward(layer, input)


def adopt(cls: type, base: type, layer: Any, what: str) -> Any:
    """``layer`` itself as a ``cls`` (its class swapped in place), refused unless it is exactly ``base``."""
    if type(layer) is base:
        layer.__class__ = cls
    elif not isinstance(layer, cls):
        raise UnsupportedError(f"{what}: {type(layer).__name__} is not a plain nn.{base.__name__}",
                               f"subclasses keep their own forward; construct a {cls.__name__} instead")
    return layer


def swap(model: torch.nn.Module, old: type, new: type) -> int:
    """Every module of exactly class ``old`` in ``model`` becomes ``new`` (in place); how many."""
    count = 0
    for mod in model.modules():
        if type(mod) is old:
            mod.__class__ = new
            count += 1
    return count


def patch_process(base: type, forward: Any) -> int:
    """``base.forward`` replaced by ``forward`` for the whole process (1), or already (0)."""
    if base in _PATCHED:
        return 0
    _PATCHED[base] = base.forward
    base.forward = forward
    return 1


def unpatch_process(base: type) -> int:
    original = _PATCHED.pop(base, None)
    if original is None:
        return 0
    base.forward = original
    return 1
