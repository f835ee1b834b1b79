"""``tracea.ops.gemm``'s PyTorch pieces: the ``torch.compile`` backend's custom ops for matmul and linear (each
declared with torch's own op beside it) and how it finds them in a graph (``MATCHES``); ``TraceaLinear`` and
``patch_linear`` / ``unpatch_linear`` (``PIECES``), an ``nn.Linear`` whose forward runs ``tracea.ops.gemm``,
its weight read in place as a column-major operand. Importing this module imports torch."""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from tracea.doctor.errors import BadInputError

from .. import _dispatch
from .._arrays import is_torch
from .._functions import gemm
from .._torch_args import Match, arg, dense
from ..compile_choice import custom_op
from ..torch_nn import adopt, check_module, patch_process, swap, torchs_forward, unpatch_process

ORDER = 10  # its place among the torch pieces (the compile backend's matches)

@custom_op("matmul", torch.matmul)
def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A 2-D b: one gemm over a's rows, any leading shape of a flattened (the (B, S, D) @ W of a model)."""
    if a.dim() < 2 or b.dim() != 2 or a.numel() == 0 or a.shape[-1] != b.shape[0]:
        return torch.matmul(a, b)
    y = gemm(dense(a).reshape(-1, a.shape[-1]), dense(b))
    return y.reshape(*a.shape[:-1], b.shape[1])


@_matmul.register_fake
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


@custom_op("linear", F.linear)
def _linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ w.T (+ bias) over any leading shape of x: one gemm on the flattened rows."""
    if x.dim() < 1 or w.dim() != 2 or x.shape[-1] != w.shape[1] or x.numel() == 0 or (
            bias is not None and tuple(bias.shape) != (w.shape[0],)):  # F.linear broadcasts any other bias
        return F.linear(x, w, bias)
    rows = dense(x).reshape(-1, x.shape[-1])
    y = gemm(rows, dense(w).t(), bias=None if bias is None else dense(bias))
    return y.reshape(*x.shape[:-1], w.shape[0])


@_linear.register_fake
def _(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, w, bias)


def _two(node: fx.Node) -> tuple[Any, ...] | None:
    return None if node.kwargs or len(node.args) != 2 else tuple(node.args)


def _linear_args(node: fx.Node) -> tuple[Any, ...] | None:
    return node.args[0], arg(node, 1, "weight", None), arg(node, 2, "bias", None)



MATCHES = (
    Match("matmul", (torch.matmul, operator.matmul, torch.mm, torch.Tensor.matmul, torch.Tensor.mm, "matmul", "mm"),
          _two),
    Match("linear", (F.linear, torch._C._nn.linear), _linear_args),
)

_TORCH_LINEAR = torch.nn.Linear.forward  # PyTorch's own, captured before any patch


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
    return torchs_forward("gemm", self, input, reason, torch.nn.Linear, _TORCH_LINEAR)


class TraceaLinear(torch.nn.Linear):
    """A drop-in ``nn.Linear``: same constructor, parameters and ``state_dict``; forward through
    ``tracea.ops.gemm`` (the weight read in place; PyTorch's own op where the kernels do not take the call:
    autograd, dtypes, devices, as ``tracea.ops.explain(layer, x)`` says)."""

    forward = _linear_forward

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> TraceaLinear:
        """``linear`` itself, now a TraceaLinear (in place, as ``patch_linear(model)`` does)."""
        return adopt(cls, torch.nn.Linear, linear, "from_linear")  # type: ignore[no-any-return]


def patch_linear(model: torch.nn.Module | None = None) -> int:
    """Route ``nn.Linear`` forwards through Tracea: in ``model`` (its plain ``nn.Linear`` layers become
    ``TraceaLinear``; returns how many), or process-wide without a model (1 when this call patched, else 0)."""
    check_module("patch_linear", model)
    return patch_process(torch.nn.Linear, _linear_forward) if model is None else \
        swap(model, torch.nn.Linear, TraceaLinear)


def unpatch_linear(model: torch.nn.Module | None = None) -> int:
    """Undo ``patch_linear`` (in ``model``, or process-wide); returns how many it turned back."""
    check_module("unpatch_linear", model)
    return unpatch_process(torch.nn.Linear) if model is None else swap(model, TraceaLinear, torch.nn.Linear)


# The public pieces (tracea.ops offers them by these names, which _functions/gemm.py declares in TORCH_PIECES),
# and the forwards that make a layer Tracea's for ``tracea.ops.explain``.
PIECES = {"TraceaLinear": TraceaLinear, "patch_linear": patch_linear, "unpatch_linear": unpatch_linear}
FORWARDS = (_linear_forward,)
