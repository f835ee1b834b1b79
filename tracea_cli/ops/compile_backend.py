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
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from . import _torch
from .compile_choice import Choice, measure, prebuild, start_prebuild, static_shapes, unmeasured

LOG = logging.getLogger("tracea.compile")

# What the last graph compiled by the backend became: one dict per graph, newest last.
REPORTS: list[dict[str, Any]] = []


def _match(gm: fx.GraphModule, node: fx.Node) -> tuple[Callable[..., Any], tuple[Any, ...] | None, str] | None:
    """(custom op, its arguments or None when this call's options are not taken, kind) for a node some op's
    PyTorch pieces know (``_torch/<op>.py``'s ``MATCHES``)."""
    t = node.target
    if node.op == "call_module":
        mod = gm.get_submodule(str(t))
        for m in _torch.MATCHES:
            if m.module is not None and isinstance(mod, m.module):
                return m.custom, m.module_args(gm, node), m.kind
        return None
    if node.op not in ("call_function", "call_method"):
        return None
    for m in _torch.MATCHES:
        if any(t is target or (isinstance(t, str) and t == target) for target in m.targets):
            return m.custom, m.args(node), m.kind
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
