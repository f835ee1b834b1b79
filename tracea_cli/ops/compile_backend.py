"""``torch.compile(model, backend="tracea")``: a TorchDynamo backend that swaps the matmuls, convolutions,
softmaxes and scaled-dot-product attentions of the captured FX graph for ``tracea.ops`` calls where Tracea's
kernel is faster on that node's shape, and hands the rest to Inductor.

Which nodes it swaps (``choose``): by default ("measure") each matched node with static shapes is run both
ways once, at compile time, on random tensors of its shapes, dtypes and strides: Tracea's op is checked
against torch's and both are timed (CUDA events on a GPU), and the node becomes a Tracea op only when the
result is right and its median is at most ``MARGIN`` of torch's: device time alone under CUDA graph trees
(``mode="reduce-overhead"``), and also each call's time with its host time otherwise. Each shape is measured
once a process (``CHOICES``). A node with dynamic shapes, options the ops do not take, or a kernel path that falls back is
kept, with the reason. ``make_backend(choose="always")`` swaps every matched node unmeasured. The report of
each graph (``last_report()``, ``format_report``) says which nodes became Tracea kernels and why the others
did not.

The swapped calls are torch custom ops (``tracea::matmul`` ...): Inductor and FakeTensor tracing see an
opaque op with a shape rule, never Tracea's launch code, and the real op returns the strides its fake
promises. ``torch.compile(..., mode=...)`` and ``options=`` reach Inductor (``mode="reduce-overhead"``: its
CUDA graph trees). Tracea kernels are forward-only: a graph compiled where autograd must flow (grad mode on
and an input that requires grad) goes to Inductor unchanged. torch discovers the backend through the
``torch_dynamo_backends`` entry point (pyproject.toml) or ``tracea.ops.register_compile_backend()``; this
module imports torch and is itself imported only by those paths.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from ._functions import attention, conv2d, gemm, softmax
from .compile_choice import Choice, custom_op, measure, prebuild, start_prebuild, static_shapes, unmeasured

LOG = logging.getLogger("tracea.compile")

# What the last graph compiled by the backend became: one dict per graph, newest last.
REPORTS: list[dict[str, Any]] = []


def _dense(t: torch.Tensor) -> torch.Tensor:
    return t.detach() if t.is_contiguous() else t.detach().contiguous()


def _channels_last(x: torch.Tensor) -> bool:
    """A 4-D tensor dense in channels_last memory and not also plain contiguous (what the conv reads in place)."""
    return x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _dense4(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the conv reads it: channels_last kept, anything else made contiguous."""
    return t.detach() if _channels_last(t) else _dense(t)


def _laid(y: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """``y`` in the memory format the op's fake promised (a fallback may return another)."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return y if y.is_contiguous(memory_format=fmt) and (channels_last or y.is_contiguous()) else \
        y.contiguous(memory_format=fmt)


@custom_op("matmul", torch.matmul)
def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A 2-D b: one gemm over a's rows, any leading shape of a flattened (the (B, S, D) @ W of a model)."""
    if a.dim() < 2 or b.dim() != 2 or a.numel() == 0 or a.shape[-1] != b.shape[0]:
        return torch.matmul(a, b)
    y = gemm(_dense(a).reshape(-1, a.shape[-1]), _dense(b))
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
    rows = _dense(x).reshape(-1, x.shape[-1])
    y = gemm(rows, _dense(w).t(), bias=None if bias is None else _dense(bias))
    return y.reshape(*x.shape[:-1], w.shape[0])


@_linear.register_fake
def _(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, w, bias)


@custom_op("conv2d", lambda x, w, b, st, pad, dil, g: F.conv2d(x, w, b, st, pad, dil, g))
def _conv2d(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: list[int], padding: list[int],
            dilation: list[int], groups: int) -> torch.Tensor:
    if x.dim() != 4:
        return F.conv2d(x, w, bias, stride, padding, dilation, groups)
    y = conv2d(_dense4(x), _dense4(w), None if bias is None else _dense(bias), tuple(stride), tuple(padding),
               tuple(dilation), groups)
    return _laid(y, _channels_last(x))


@_conv2d.register_fake
def _(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: list[int], padding: list[int],
      dilation: list[int], groups: int) -> torch.Tensor:
    y = F.conv2d(x, w, bias, stride, padding, dilation, groups)
    if x.dim() != 4:
        return y
    fmt = torch.channels_last if _channels_last(x) else torch.contiguous_format
    return y.contiguous(memory_format=fmt)


@custom_op("softmax", torch.softmax)
def _softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    return softmax(_dense(x), dim)


@_softmax.register_fake
def _(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


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
    return _laid(attention(_dense(q), _dense(k), _dense(v), causal=causal, scale=scale), False)


@_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float | None,
      gqa: bool = False) -> torch.Tensor:
    return q.new_empty((*q.shape[:-1], v.shape[-1]))


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
    causal, scale, gqa = _arg(node, 5, "is_causal", False), node.kwargs.get("scale"), node.kwargs.get("enable_gqa", False)
    if not isinstance(causal, bool) or not isinstance(gqa, bool) or not isinstance(scale, (float, type(None))):
        return None
    return q, k, v, causal, scale, gqa


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


def _match_args(gm: fx.GraphModule, node: fx.Node) -> tuple[Callable[..., Any], tuple[Any, ...] | None, str] | None:
    """``_match`` without touching the graph (a module call's match inserts its parameters' nodes): None for
    module calls, which Dynamo's graphs do not hold (their parameters are inputs there)."""
    return None if node.op == "call_module" else _match(gm, node)


def _needs_autograd(example_inputs: list[Any]) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


# ------------------------------------------------------------------------------------ which nodes to swap

def _example(gm: fx.GraphModule, a: Any) -> Any:
    """What an argument of a matched node holds at compile time: a parameter or buffer (get_attr), a node's
    FakeTensor (``example_value``), or the plain value."""
    if not isinstance(a, fx.Node):
        return a
    if a.op == "get_attr":
        obj: Any = gm
        for part in str(a.target).split("."):
            obj = getattr(obj, part)
        return obj
    return a.meta.get("example_value", a.meta.get("val"))


def _examples(gm: fx.GraphModule, args: tuple[Any, ...]) -> tuple[Any, ...] | str:
    """The arguments' example values, or why the node cannot be measured."""
    examples = tuple(_example(gm, a) for a in args)
    tensors = [t for t in examples if isinstance(t, torch.Tensor)]
    if not tensors or any(isinstance(a, fx.Node) and not isinstance(t, torch.Tensor)
                          for t, a in zip(examples, args, strict=True)):
        return "an argument has no example value at compile time: not measured"
    if not all(static_shapes(t) for t in tensors):
        return "dynamic shapes (Tracea's kernels are built per shape; compile with dynamic=False)"
    return examples


def _decide(gm: fx.GraphModule, kind: str, args: tuple[Any, ...], choose: str, graphed: bool = False) -> Choice:
    if choose == "always":
        return Choice(True, "every matched node is swapped (choose='always')")
    examples = _examples(gm, args)
    if isinstance(examples, str):
        return Choice(False, examples)
    return measure(kind, examples, graphed)


def _pending(gm: fx.GraphModule) -> list[tuple[str, tuple[Any, ...]]]:
    """The (kind, example arguments) of every node of ``gm`` the measured choice would measure."""
    pending = []
    for node in gm.graph.nodes:
        found = _match_args(gm, node)
        if found is not None and found[1] is not None:
            ex = _examples(gm, found[1])
            if not isinstance(ex, str):
                pending.append((found[2], ex))
    return pending


# What Dynamo hangs on its GraphModule and its placeholders besides the graph (output_graph.py), which
# AOTAutograd reads back (_try_get_metadata_from_dynamo): without them a copy passes for an exported graph,
# its parameters stop being static inputs, and Inductor's CUDA graph trees copy every parameter into the
# graph at every replay (on an H200, 87 us of a ResNet-50 forward at batch 32).
_DYNAMO_MODULE_ATTRS = ("_param_name_to_source", "_source_to_user_stacks", "_backend_id")
_DYNAMO_NODE_ATTRS = ("_dynamo_source",)


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A GraphModule of a copy of ``gm``'s graph (nodes and their meta), sharing its parameters and buffers
    and carrying Dynamo's metadata: what the rewrite changes while Inductor compiles (and may rewrite in
    place) the original."""
    graph = fx.Graph()
    graph._codegen = gm.graph._codegen
    copies: dict[fx.Node, fx.Node] = {}
    value, old_out = graph.graph_copy(gm.graph, copies, return_output_node=True)
    out = graph.output(value, type_expr=old_out.type)
    out.meta = dict(old_out.meta)
    for old, new_node in copies.items():
        for name in _DYNAMO_NODE_ATTRS:
            if hasattr(old, name):
                setattr(new_node, name, getattr(old, name))
    new = fx.GraphModule(gm, graph)
    new.meta = dict(getattr(gm, "meta", {}))
    for name in _DYNAMO_MODULE_ATTRS:
        if hasattr(gm, name):
            setattr(new, name, getattr(gm, name))
    return new


def rewrite(gm: fx.GraphModule, example_inputs: list[Any], choose: str = "measure",
            graphed: bool = False, prebuilt: bool = False) -> dict[str, Any]:
    """Swap the known calls of ``gm`` for Tracea's custom ops in place, where ``choose`` says (see the module
    docstring; ``graphed``: the compiled graph replays as a CUDA graph; ``prebuilt``: the kernels to measure
    were built already); returns the report."""
    report: dict[str, Any] = {"replaced": [], "kept": [], "untouched": None, "compiler": None, "choices": [],
                              "seconds": {}}
    if _needs_autograd(example_inputs):
        report["untouched"] = ("autograd: an input requires grad with grad mode on and Tracea kernels have no "
                               "backward pass (compile under torch.no_grad() or torch.inference_mode())")
        return report
    t0 = time.perf_counter()
    if choose == "measure" and not prebuilt:  # the kernels to measure, built at once before the first measurement
        prebuild(_pending(gm))
    report["seconds"]["build"] = time.perf_counter() - t0
    for node in list(gm.graph.nodes):
        found = _match(gm, node)
        if found is None:
            continue
        op, args, kind = found
        label = f"{node.name} ({node.op} {getattr(node.target, '__name__', node.target)})"
        if args is None:
            report["kept"].append(f"{label}: options the Tracea op does not take")
            continue
        choice = _decide(gm, kind, args, choose, graphed)
        report["choices"].append({"node": node.name, "kind": kind, "tracea": choice.tracea, "reason": choice.reason,
                                  "tracea_ms": choice.tracea_ms, "torch_ms": choice.torch_ms})
        if not choice.tracea:
            report["kept"].append(f"{label}: {choice.reason}")
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
    report["seconds"]["choose"] = time.perf_counter() - t0
    return report


def _compile_fx(gm: fx.GraphModule, example_inputs: list[Any], patches: dict[str, Any]) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, config_patches=patches) if patches else compile_fx(gm, example_inputs)


def _overlapped(gm: fx.GraphModule, example_inputs: list[Any], patches: dict[str, Any], graphed: bool,
                mode: str | None) -> tuple[dict[str, Any], Callable[..., Any] | None, fx.GraphModule] | None:
    """The measured choice's kernels built while Inductor compiles the graph as it is: (the report of the
    rewritten copy, Inductor's compile of the original or None where it failed, the copy). A graph where most
    nodes keep torch's op then costs about what Inductor's own compile costs, not that plus the builds
    (on an H200, a transformer block's first compile was 3.8 s of builds beside 4.0 s of Inductor). None:
    nothing to build (every signature measured before, or none to measure), so nothing to overlap."""
    if _needs_autograd(example_inputs):
        return None
    pending = _pending(gm)
    if not pending or not unmeasured(pending, graphed):
        return None
    t0 = time.perf_counter()
    wait = start_prebuild(pending)
    rewritten = _copy(gm)
    plain = None
    try:
        plain = _compile_fx(gm, example_inputs, patches)
    except Exception as exc:  # noqa: BLE001 - the rewritten copy is compiled (or run as Python) below
        LOG.debug("tracea backend: Inductor failed on the graph as it was (%s)", exc)
    t_inductor = time.perf_counter() - t0
    wait()
    t_built = time.perf_counter() - t0
    report = rewrite(rewritten, example_inputs, "measure", graphed=graphed, prebuilt=True)
    report["seconds"].update(build=t_built, inductor=t_inductor, choose=time.perf_counter() - t0)
    report["overlapped"] = True
    if plain is not None and not report["replaced"]:
        report["compiler"] = "inductor" + (f" ({mode})" if mode else "")
    return report, plain, rewritten


def _inductor_patches(mode: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    """Inductor's config for ``torch.compile(mode=..., options=...)``, as its own backend reads them."""
    from torch._inductor import list_mode_options

    return {**(list_mode_options(mode) if mode else {}), **(options or {})}


def make_backend(inductor: bool = True, choose: str = "measure") -> Callable[..., Callable[..., Any]]:
    """A backend; ``inductor=False`` runs the rewritten graph as Python (fast to compile, for tests);
    ``choose``: "measure" (swap a node where Tracea is faster on its shape) or "always"."""
    if choose not in ("measure", "always"):
        raise ValueError(f"choose: 'measure' or 'always', not {choose!r}")

    def backend(gm: fx.GraphModule, example_inputs: list[Any], mode: str | None = None,
                options: dict[str, Any] | None = None) -> Callable[..., Any]:
        patches = _inductor_patches(mode, options) if inductor else {}
        graphed = bool(patches.get("triton.cudagraphs"))
        early = _overlapped(gm, example_inputs, patches, graphed, mode) if inductor and choose == "measure" else None
        if early is not None:
            report, plain, rewritten = early
            REPORTS.append(report)
            del REPORTS[:-16]
            if plain is not None and not report["replaced"]:
                return plain  # no node swapped: Inductor's compile of the graph as it was is the answer
            gm = rewritten
        else:
            report = rewrite(gm, example_inputs, choose, graphed=graphed)
            REPORTS.append(report)
        del REPORTS[:-16]
        if report["untouched"]:
            LOG.debug("tracea backend: graph left unchanged: %s", report["untouched"])
        for line in report["replaced"]:
            LOG.debug("tracea backend: replaced %s", line)
        if inductor:
            t0 = time.perf_counter()
            try:
                compiled = _compile_fx(gm, example_inputs, patches)
                report["compiler"] = "inductor" + (f" ({mode})" if mode else "")
                secs = report["seconds"]
                secs["inductor"] = secs.get("inductor", 0.0) + time.perf_counter() - t0
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


def format_report(report: dict[str, Any] | None = None) -> str:
    """A graph's report as text (the last graph's by default): what became Tracea kernels, what was kept and
    why, what compiled the rest."""
    if report is None:
        report = last_report()
        if report is None:
            return "no graph has been compiled with backend='tracea' in this process"
    if not isinstance(report, dict) or not {"replaced", "kept", "untouched", "compiler"} <= set(report):
        from tracea.doctor.errors import BadInputError

        raise BadInputError(f"format_report: expected a report of tracea.ops.last_report(), got {type(report).__name__}",
                            "format_report() prints the last graph's")
    if report.get("untouched"):
        return f"graph left to {report.get('compiler')}: {report['untouched']}"
    lines = [f"{len(report['replaced'])} node(s) on Tracea kernels, {len(report['kept'])} kept; the rest by "
             f"{report.get('compiler')}"]
    secs = report.get("seconds") or {}
    if "choose" in secs:
        lines.append(f"  compile: {secs['choose']:.2f} s to choose, the measured kernels built by {secs.get('build', 0):.2f} s"
                     + (f"; {secs['inductor']:.2f} s in Inductor" if "inductor" in secs else "")
                     + (" (Inductor compiled the graph while the kernels built)" if report.get("overlapped") else ""))
    why = {c["node"]: c["reason"] for c in report.get("choices", ()) if c["tracea"]}
    lines += [f"  tracea: {r}" + (f" ({why[r.split(' ', 1)[0]]})" if r.split(" ", 1)[0] in why else "")
              for r in report["replaced"]]
    lines += [f"  kept:   {k}" for k in report["kept"]]
    return "\n".join(lines)


def last_report() -> dict[str, Any] | None:
    """What the backend did to the last graph it compiled: ``replaced`` (node -> tracea op), ``kept``
    (matched nodes whose options the ops do not take), ``untouched`` (why the graph was left alone),
    ``compiler`` (inductor, or python and why), ``choices`` (each measured node's figures), ``seconds`` (the
    compile's wall time: ``build`` the measured kernels, ``choose`` the whole rewrite, ``inductor`` the rest)."""
    return REPORTS[-1] if REPORTS else None


def register_compile_backend() -> None:
    """Register ``backend="tracea"`` with TorchDynamo (the entry point does it without this call)."""
    from torch._dynamo.backends import registry

    registry._lazy_import()
    if "tracea" not in registry._COMPILER_FNS:
        registry.register_backend(tracea_backend, name="tracea")
