"""The PyTorch pieces of ``tracea.ops``: ``TraceaConv2d`` (an ``nn.Conv2d`` whose forward runs
``tracea.ops.conv2d``), ``TraceaLinear`` (an ``nn.Linear`` whose forward runs ``tracea.ops.gemm``, its weight
read in place as a column-major operand), and ``patch_conv2d`` / ``unpatch_conv2d``, ``patch_linear`` /
``unpatch_linear``. Importing this module imports torch.

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
from ._arrays import is_torch
from ._engine import STATS, Route
from ._functions import conv2d, gemm

_TORCH_FORWARD = torch.nn.Conv2d.forward  # PyTorch's own, captured before any patch
_TORCH_LINEAR = torch.nn.Linear.forward
_PATCHED: dict[type, Any] = {}  # nn class -> its forward before a process-wide patch


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


def _torchs_forward(op: str, layer: Any, input: Any, reason: str, base: type, forward: Any) -> Any:  # noqa: A002
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


def _forward(self: torch.nn.Conv2d, input: Any) -> Any:  # noqa: A002 - nn.Conv2d's own argument name
    reason = _own_reason(self, input)
    if reason is None:
        return conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
    return _torchs_forward("conv2d", self, input, reason, torch.nn.Conv2d, _TORCH_FORWARD)


def _adopt(cls: type, base: type, layer: Any, what: str) -> Any:
    """``layer`` itself as a ``cls`` (its class swapped in place), refused unless it is exactly ``base``."""
    if type(layer) is base:
        layer.__class__ = cls
    elif not isinstance(layer, cls):
        raise UnsupportedError(f"{what}: {type(layer).__name__} is not a plain nn.{base.__name__}",
                               f"subclasses keep their own forward; construct a {cls.__name__} instead")
    return layer


def _swap(model: torch.nn.Module, old: type, new: type) -> int:
    """Every module of exactly class ``old`` in ``model`` becomes ``new`` (in place); how many."""
    count = 0
    for mod in model.modules():
        if type(mod) is old:
            mod.__class__ = new
            count += 1
    return count


def _patch_process(base: type, forward: Any) -> int:
    """``base.forward`` replaced by ``forward`` for the whole process (1), or already (0)."""
    if base in _PATCHED:
        return 0
    _PATCHED[base] = base.forward
    base.forward = forward
    return 1


def _unpatch_process(base: type) -> int:
    original = _PATCHED.pop(base, None)
    if original is None:
        return 0
    base.forward = original
    return 1


class TraceaConv2d(torch.nn.Conv2d):
    """A drop-in ``nn.Conv2d``: same constructor, parameters and ``state_dict``; forward through
    ``tracea.ops.conv2d`` (PyTorch's forward where the kernel path does not apply, see the module docstring)."""

    forward = _forward

    @classmethod
    def from_conv(cls, conv: torch.nn.Conv2d) -> TraceaConv2d:
        """``conv`` itself, now a TraceaConv2d (in place, as ``patch_conv2d(model)`` does)."""
        return _adopt(cls, torch.nn.Conv2d, conv, "from_conv")  # type: ignore[no-any-return]


def _nchw_layers(model: torch.nn.Module) -> list[str]:
    return [name for name, mod in model.named_modules() if isinstance(mod, torch.nn.Conv2d)
            and mod.weight.is_cuda and mod.weight.dim() == 4 and mod.weight.is_contiguous()
            and not mod.weight.is_contiguous(memory_format=torch.channels_last)]


def patch_conv2d(model: torch.nn.Module | None = None, channels_last: bool = False) -> int:
    """Route ``nn.Conv2d`` forwards through Tracea: in ``model`` (its plain ``nn.Conv2d`` layers become
    ``TraceaConv2d``; returns how many), or, without a model, process-wide (returns 1 when this call patched,
    0 when it already was). ``channels_last=True`` first converts ``model`` to channels_last memory (then
    give it channels_last inputs too); without it, NCHW weights on a GPU get a warning naming that fix."""
    _module("patch_conv2d", model)
    if not isinstance(channels_last, bool):
        raise BadInputError(f"patch_conv2d: channels_last expected True or False, got {type(channels_last).__name__}",
                            "patch_conv2d(model, channels_last=True) converts the model's memory format")
    if model is None:
        if channels_last:
            raise BadInputError("patch_conv2d: channels_last=True converts a model, and none was given",
                                "patch_conv2d(model, channels_last=True)")
        return _patch_process(torch.nn.Conv2d, _forward)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    else:
        nchw = _nchw_layers(model)
        if nchw:
            import warnings

            warnings.warn(
                f"patch_conv2d: {len(nchw)} convolution(s) hold NCHW weights on the GPU ({nchw[0]}, ...). Tracea's "
                "Hopper convolutions read NHWC, so x, the filter and the result are transposed at every call "
                "(three extra passes over memory; on an H100, ResNet-50's convolutions ran 0.30-1.19x cuDNN this "
                "way against 1.12-3.14x in channels_last). Fix: model.to(memory_format=torch.channels_last) and "
                "channels_last inputs, or patch_conv2d(model, channels_last=True)", stacklevel=2)
    return _swap(model, torch.nn.Conv2d, TraceaConv2d)


def unpatch_conv2d(model: torch.nn.Module | None = None) -> int:
    """Undo ``patch_conv2d`` (in ``model``, or process-wide); returns how many it turned back."""
    _module("unpatch_conv2d", model)
    return _unpatch_process(torch.nn.Conv2d) if model is None else _swap(model, TraceaConv2d, torch.nn.Conv2d)


# ------------------------------------------------------------------------------------------ nn.Linear

def _linear_reason(layer: torch.nn.Linear, x: Any) -> str | None:
    if is_torch(x) and x.dim() == 0:
        return "a 0-D input (nn.Linear refuses it too)"
    return None


def _linear_forward(self: torch.nn.Linear, input: Any) -> Any:  # noqa: A002 - nn.Linear's own argument name
    """``input @ weight.T + bias`` through ``tracea.ops.gemm``: the rows of any leading shape as one GEMM, the
    weight (out, in) read in place as the column-major (in, out) operand."""
    reason = _linear_reason(self, input)
    if reason is None and is_torch(input) and input.dim() >= 1:
        if input.shape[-1] != self.in_features:
            raise BadInputError(f"TraceaLinear: input has {input.shape[-1]} features, the layer takes "
                                f"{self.in_features}", "the last dimension of the input is in_features")
        rows = input.reshape(-1, input.shape[-1])
        y = gemm(rows, self.weight.t(), bias=self.bias)
        if _dispatch.EXPLAINING.get():
            return y
        return y.reshape(*input.shape[:-1], self.out_features)
    if reason is None:  # not a tensor: tracea.ops.gemm says what is wrong, as it does for a direct call
        return gemm(input, self.weight.t(), bias=self.bias)
    return _torchs_forward("gemm", self, input, reason, torch.nn.Linear, _TORCH_LINEAR)


class TraceaLinear(torch.nn.Linear):
    """A drop-in ``nn.Linear``: same constructor, parameters and ``state_dict``; forward through
    ``tracea.ops.gemm`` (the weight read in place; PyTorch's own op where the kernels do not take the call:
    autograd, dtypes, devices, as ``tracea.ops.explain(layer, x)`` says)."""

    forward = _linear_forward

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> TraceaLinear:
        """``linear`` itself, now a TraceaLinear (in place, as ``patch_linear(model)`` does)."""
        return _adopt(cls, torch.nn.Linear, linear, "from_linear")  # type: ignore[no-any-return]


def patch_linear(model: torch.nn.Module | None = None) -> int:
    """Route ``nn.Linear`` forwards through Tracea: in ``model`` (its plain ``nn.Linear`` layers become
    ``TraceaLinear``; returns how many), or process-wide without a model (1 when this call patched, else 0)."""
    _module("patch_linear", model)
    return _patch_process(torch.nn.Linear, _linear_forward) if model is None else \
        _swap(model, torch.nn.Linear, TraceaLinear)


def unpatch_linear(model: torch.nn.Module | None = None) -> int:
    """Undo ``patch_linear`` (in ``model``, or process-wide); returns how many it turned back."""
    _module("unpatch_linear", model)
    return _unpatch_process(torch.nn.Linear) if model is None else _swap(model, TraceaLinear, torch.nn.Linear)
