"""``torch.compile(model, backend="tracea")``: a TorchDynamo backend that swaps the matmuls, convolutions,
softmaxes and scaled-dot-product attentions of the captured FX graph for ``tracea.ops`` calls and hands the
rest to Inductor.

The swapped calls are torch custom ops (``tracea::matmul`` ...): Inductor and FakeTensor tracing see an
opaque op with a shape rule, never Tracea's launch code. Each op runs ``tracea.ops`` at run time, which
falls back to torch's op where the kernels do not take the call (``tracea.ops.explain`` says why).
Tracea kernels are forward-only: a graph compiled where autograd must flow (grad mode on and an input that
requires grad) goes to Inductor unchanged. torch discovers the backend through the
``torch_dynamo_backends`` entry point (pyproject.toml) or ``tracea.ops.register_compile_backend()``; this
module imports torch and is itself imported only by those paths.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from ._functions import attention, conv2d, gemm, softmax

LOG = logging.getLogger("tracea.compile")

# What the last graph compiled by the backend became: one dict per graph, newest last.
REPORTS: list[dict[str, Any]] = []


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t.detach() if t.is_contiguous() else t.detach().contiguous()


@torch.library.custom_op("tracea::matmul", mutates_args=())
def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A 2-D b: one gemm over a's rows, any leading shape of a flattened (the (B, S, D) @ W of a model)."""
    if a.dim() < 2 or b.dim() != 2 or a.numel() == 0:
        return torch.matmul(a, b)
    y = gemm(_dense(a).reshape(-1, a.shape[-1]), _dense(b))
    return y.reshape(*a.shape[:-1], b.shape[1])


@_matmul.register_fake
def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


@torch.library.custom_op("tracea::linear", mutates_args=())
def _linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ w.T (+ bias) over any leading shape of x: one gemm on the flattened rows."""
    if x.dim() < 1 or w.dim() != 2 or x.shape[-1] != w.shape[1] or x.numel() == 0:
        return F.linear(x, w, bias)
    rows = _dense(x).reshape(-1, x.shape[-1])
    y = gemm(rows, _dense(w).t(), bias=None if bias is None else _dense(bias))
    return y.reshape(*x.shape[:-1], w.shape[0])


@_linear.register_fake
def _(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, w, bias)


@torch.library.custom_op("tracea::conv2d", mutates_args=())
def _conv2d(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: list[int], padding: list[int],
            dilation: list[int], groups: int) -> torch.Tensor:
    if x.dim() != 4:
        return F.conv2d(x, w, bias, stride, padding, dilation, groups)
    return conv2d(_dense(x), _dense(w), None if bias is None else _dense(bias), tuple(stride),
                      tuple(padding), tuple(dilation), groups)


@_conv2d.register_fake
def _(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: list[int], padding: list[int],
      dilation: list[int], groups: int) -> torch.Tensor:
    return F.conv2d(x, w, bias, stride, padding, dilation, groups)


@torch.library.custom_op("tracea::softmax", mutates_args=())
def _softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return softmax(_dense(x), dim)


@_softmax.register_fake
def _(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("tracea::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> torch.Tensor:
    # torch aligns is_causal top-left, Tracea bottom-right: they agree only when Sq == Sk.
    if q.dim() != 4 or (causal and q.shape[-2] != k.shape[-2]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    return attention(_dense(q), _dense(k), _dense(v), causal=causal, scale=scale)


@_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None) -> torch.Tensor:
    return q.new_empty(q.shape)


def _pair(v: Any) -> list[int] | None:
    if isinstance(v, int):
        return [v, v]
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return list(v)
    return None


def _arg(node: fx.Node, i: int, name: str, default: Any) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


def _conv_args(node: fx.Node) -> tuple[Any, ...] | None:
    """(x, w, bias, stride, padding, dilation, groups) of a functional conv2d, None for string padding."""
    x, w = node.args[0], _arg(node, 1, "weight", None)
    stride, padding = _pair(_arg(node, 3, "stride", 1)), _pair(_arg(node, 4, "padding", 0))
    dilation, groups = _pair(_arg(node, 5, "dilation", 1)), _arg(node, 6, "groups", 1)
    if None in (stride, padding, dilation) or not isinstance(groups, int):
        return None
    return x, w, _arg(node, 2, "bias", None), stride, padding, dilation, groups


def _module_conv(gm: fx.GraphModule, node: fx.Node) -> tuple[Any, ...] | None:
    mod = gm.get_submodule(str(node.target))
    if not isinstance(mod, torch.nn.Conv2d) or mod.padding_mode != "zeros" or isinstance(mod.padding, str):
        return None
    graph = gm.graph
    with graph.inserting_before(node):
        w = graph.get_attr(f"{node.target}.weight")
        b = None if mod.bias is None else graph.get_attr(f"{node.target}.bias")
    return (node.args[0], w, b, list(mod.stride), list(mod.padding), list(mod.dilation), mod.groups)


def _softmax_args(node: fx.Node) -> tuple[Any, ...] | None:
    dim = _arg(node, 1, "dim", None)
    if not isinstance(dim, int) or _arg(node, 2, "dtype", None) is not None or node.kwargs.get("_stacklevel"):
        return None
    return node.args[0], dim


def _sdpa_args(node: fx.Node) -> tuple[Any, ...] | None:
    q, k, v = (_arg(node, i, n, None) for i, n in enumerate(("query", "key", "value")))
    if _arg(node, 3, "attn_mask", None) is not None or _arg(node, 4, "dropout_p", 0.0) not in (0, 0.0):
        return None
    causal, scale = _arg(node, 5, "is_causal", False), node.kwargs.get("scale")
    if not isinstance(causal, bool) or node.kwargs.get("enable_gqa") or not isinstance(scale, (float, type(None))):
        return None
    return q, k, v, causal, scale


def _two(node: fx.Node) -> tuple[Any, ...] | None:
    return None if node.kwargs or len(node.args) != 2 else tuple(node.args)


def _linear_args(node: fx.Node) -> tuple[Any, ...] | None:
    return node.args[0], _arg(node, 1, "weight", None), _arg(node, 2, "bias", None)


_MATMUL = (torch.matmul, operator.matmul, torch.mm, torch.Tensor.matmul, torch.Tensor.mm, "matmul", "mm")
_SOFTMAX = (torch.softmax, F.softmax, torch.Tensor.softmax, "softmax")
_CONV = (F.conv2d, torch.conv2d)
_SDPA = (F.scaled_dot_product_attention,)


def _match(gm: fx.GraphModule, node: fx.Node) -> tuple[Callable[..., Any], tuple[Any, ...] | None, str] | None:
    """(custom op, its arguments or None when this call's options are not taken, kind) for a node we know."""
    t = node.target
    if node.op == "call_module":
        return (torch.ops.tracea.conv2d.default, _module_conv(gm, node), "conv2d") \
            if isinstance(gm.get_submodule(str(t)), torch.nn.Conv2d) else None
    if node.op not in ("call_function", "call_method"):
        return None
    if t in _MATMUL:
        return torch.ops.tracea.matmul.default, _two(node), "matmul"
    if t is F.linear or t is torch._C._nn.linear:
        return torch.ops.tracea.linear.default, _linear_args(node), "linear"
    if t in _CONV:
        return torch.ops.tracea.conv2d.default, _conv_args(node), "conv2d"
    if t in _SOFTMAX:
        return torch.ops.tracea.softmax.default, _softmax_args(node), "softmax"
    if t in _SDPA:
        return torch.ops.tracea.attention.default, _sdpa_args(node), "attention"
    return None


def _needs_autograd(example_inputs: list[Any]) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


def rewrite(gm: fx.GraphModule, example_inputs: list[Any]) -> dict[str, Any]:
    """Swap the known calls of ``gm`` for Tracea's custom ops in place; returns the report."""
    report: dict[str, Any] = {"replaced": [], "kept": [], "untouched": None, "compiler": None}
    if _needs_autograd(example_inputs):
        report["untouched"] = ("autograd: an input requires grad with grad mode on and Tracea kernels have no "
                               "backward pass (compile under torch.no_grad() or torch.inference_mode())")
        return report
    for node in list(gm.graph.nodes):
        found = _match(gm, node)
        if found is None:
            continue
        op, args, kind = found
        label = f"{node.name} ({node.op} {getattr(node.target, '__name__', node.target)})"
        if args is None:
            report["kept"].append(f"{label}: options the Tracea op does not take")
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(op, args)
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        report["replaced"].append(f"{label} -> tracea::{kind}")
    gm.graph.eliminate_dead_code()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return report


def make_backend(inductor: bool = True) -> Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]:
    """A backend; ``inductor=False`` runs the rewritten graph as Python (fast to compile, for tests)."""

    def backend(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        report = rewrite(gm, example_inputs)
        REPORTS.append(report)
        del REPORTS[:-16]
        if report["untouched"]:
            LOG.debug("tracea backend: graph left unchanged: %s", report["untouched"])
        for line in report["replaced"]:
            LOG.debug("tracea backend: replaced %s", line)
        if inductor:
            try:
                from torch._inductor.compile_fx import compile_fx

                compiled = compile_fx(gm, example_inputs)
                report["compiler"] = "inductor"
                LOG.debug("tracea backend: the rest compiled by Inductor")
                return compiled
            except Exception as exc:  # noqa: BLE001 - any Inductor failure leaves the graph to run as Python
                report["compiler"] = f"python (Inductor failed: {type(exc).__name__}: {exc})"
                LOG.debug("tracea backend: Inductor failed (%s); the graph runs as Python", exc)
                return gm.forward
        report["compiler"] = "python"
        return gm.forward

    return backend


tracea_backend = make_backend(inductor=True)
tracea_backend.__name__ = "tracea"


def last_report() -> dict[str, Any] | None:
    """What the backend did to the last graph it compiled: ``replaced`` (node -> tracea op), ``kept``
    (matched nodes whose options the ops do not take), ``untouched`` (why the graph was left alone),
    ``compiler`` (inductor, or python and why)."""
    return REPORTS[-1] if REPORTS else None


def register_compile_backend() -> None:
    """Register ``backend="tracea"`` with TorchDynamo (the entry point does it without this call)."""
    from torch._dynamo.backends import registry

    registry._lazy_import()
    if "tracea" not in registry._COMPILER_FNS:
        registry.register_backend(tracea_backend, name="tracea")
