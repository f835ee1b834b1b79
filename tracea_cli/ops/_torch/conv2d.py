"""``tracea.ops.conv2d``'s PyTorch pieces: the ``torch.compile`` backend's custom op (declared with
``F.conv2d`` beside it) and how it finds ``F.conv2d`` and ``nn.Conv2d`` calls in a graph (``MATCHES``);
``TraceaConv2d`` and ``patch_conv2d`` / ``unpatch_conv2d`` (``PIECES``), an ``nn.Conv2d`` whose forward runs
``tracea.ops.conv2d`` (see torch_nn.py for the two ways to patch). Importing this module imports torch."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from tracea.doctor.errors import BadInputError

from .._arrays import is_torch
from .._functions import conv2d
from .._torch_args import Match, arg, channels_last, dense, dense4, int_pair, laid
from ..compile_choice import custom_op
from ..torch_nn import adopt, check_module, patch_process, swap, torchs_forward, unpatch_process

ORDER = 20  # its place among the torch pieces (the compile backend's matches)

@custom_op("conv2d", lambda x, w, b, st, pad, dil, g: F.conv2d(x, w, b, st, pad, dil, g))
def _conv2d(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: list[int], padding: list[int],
            dilation: list[int], groups: int) -> torch.Tensor:
    if x.dim() != 4:
        return F.conv2d(x, w, bias, stride, padding, dilation, groups)
    y = conv2d(dense4(x), dense4(w), None if bias is None else dense(bias), tuple(stride), tuple(padding),
               tuple(dilation), groups)
    return laid(y, channels_last(x))


@_conv2d.register_fake
def _(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: list[int], padding: list[int],
      dilation: list[int], groups: int) -> torch.Tensor:
    y = F.conv2d(x, w, bias, stride, padding, dilation, groups)
    if x.dim() != 4:
        return y
    fmt = torch.channels_last if channels_last(x) else torch.contiguous_format
    return y.contiguous(memory_format=fmt)


def _conv_args(node: fx.Node) -> tuple[Any, ...] | None:
    """(x, w, bias, stride, padding, dilation, groups) of a functional conv2d, None for string padding."""
    x, w = node.args[0], arg(node, 1, "weight", None)
    stride, padding = int_pair(arg(node, 3, "stride", 1)), int_pair(arg(node, 4, "padding", 0))
    dilation, groups = int_pair(arg(node, 5, "dilation", 1)), arg(node, 6, "groups", 1)
    if None in (stride, padding, dilation) or not isinstance(groups, int):
        return None
    return x, w, arg(node, 2, "bias", None), stride, padding, dilation, groups


def _module_conv(gm: fx.GraphModule, node: fx.Node) -> tuple[Any, ...] | None:
    mod = gm.get_submodule(str(node.target))
    if not isinstance(mod, torch.nn.Conv2d) or mod.padding_mode != "zeros" or isinstance(mod.padding, str):
        return None
    graph = gm.graph
    with graph.inserting_before(node):
        w = graph.get_attr(f"{node.target}.weight")
        b = None if mod.bias is None else graph.get_attr(f"{node.target}.bias")
    return (node.args[0], w, b, list(mod.stride), list(mod.padding), list(mod.dilation), mod.groups)



MATCHES = (Match("conv2d", (F.conv2d, torch.conv2d), _conv_args, torch.nn.Conv2d, _module_conv),)

_TORCH_FORWARD = torch.nn.Conv2d.forward  # PyTorch's own, captured before any patch


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
    return torchs_forward("conv2d", self, input, reason, torch.nn.Conv2d, _TORCH_FORWARD)


class TraceaConv2d(torch.nn.Conv2d):
    """A drop-in ``nn.Conv2d``: same constructor, parameters and ``state_dict``; forward through
    ``tracea.ops.conv2d`` (PyTorch's forward where the kernel path does not apply, see the module docstring)."""

    forward = _forward

    @classmethod
    def from_conv(cls, conv: torch.nn.Conv2d) -> TraceaConv2d:
        """``conv`` itself, now a TraceaConv2d (in place, as ``patch_conv2d(model)`` does)."""
        return adopt(cls, torch.nn.Conv2d, conv, "from_conv")  # type: ignore[no-any-return]


def _nchw_layers(model: torch.nn.Module) -> list[str]:
    return [name for name, mod in model.named_modules() if isinstance(mod, torch.nn.Conv2d)
            and mod.weight.is_cuda and mod.weight.dim() == 4 and mod.weight.is_contiguous()
            and not mod.weight.is_contiguous(memory_format=torch.channels_last)]


def patch_conv2d(model: torch.nn.Module | None = None, channels_last: bool = False) -> int:
    """Route ``nn.Conv2d`` forwards through Tracea: in ``model`` (its plain ``nn.Conv2d`` layers become
    ``TraceaConv2d``; returns how many), or, without a model, process-wide (returns 1 when this call patched,
    0 when it already was). ``channels_last=True`` first converts ``model`` to channels_last memory (then
    give it channels_last inputs too); without it, NCHW weights on a GPU get a warning naming that fix."""
    check_module("patch_conv2d", model)
    if not isinstance(channels_last, bool):
        raise BadInputError(f"patch_conv2d: channels_last expected True or False, got {type(channels_last).__name__}",
                            "patch_conv2d(model, channels_last=True) converts the model's memory format")
    if model is None:
        if channels_last:
            raise BadInputError("patch_conv2d: channels_last=True converts a model, and none was given",
                                "patch_conv2d(model, channels_last=True)")
        return patch_process(torch.nn.Conv2d, _forward)
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
    return swap(model, torch.nn.Conv2d, TraceaConv2d)


def unpatch_conv2d(model: torch.nn.Module | None = None) -> int:
    """Undo ``patch_conv2d`` (in ``model``, or process-wide); returns how many it turned back."""
    check_module("unpatch_conv2d", model)
    return unpatch_process(torch.nn.Conv2d) if model is None else swap(model, TraceaConv2d, torch.nn.Conv2d)


# The public pieces (tracea.ops offers them by these names, which _functions/conv2d.py declares in TORCH_PIECES),
# and the forwards that make a layer Tracea's for ``tracea.ops.explain``.
PIECES = {"TraceaConv2d": TraceaConv2d, "patch_conv2d": patch_conv2d, "unpatch_conv2d": unpatch_conv2d}
FORWARDS = (_forward,)
