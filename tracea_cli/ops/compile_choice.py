"""Which matched nodes of a graph become Tracea ops under ``torch.compile(backend="tracea")`` (compile_backend.py):
each signature (kind, arguments' shapes, strides, dtypes, devices, options) run both ways once on random
tensors of those shapes, Tracea's result checked against torch's and both timed; a node is swapped only
where Tracea is right and at most ``MARGIN`` of torch's time. The custom ops ``torch.ops.tracea.*`` are
registered by compile_backend through ``custom_op``, each with torch's own op beside it; compile_backend is the
only importer of this module (torch is imported here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# Tracea's median at most this share of torch's. Timed alone, a node's kernel overstates what it gains inside
# a compiled graph: on an H200 (2026-11-28), with a 0.97 margin, 17 of ResNet-50's 53 convolutions were swapped,
# each 3-43 % faster alone, and the graph under CUDA graph trees ran 0.92x Inductor's; with only the stem
# swapped, 1.00x. A tie, noise, or a small gain keeps torch's op.
MARGIN = 0.85
CHOICES: dict[tuple[Any, ...], Choice] = {}  # per (kind, arguments' shapes, strides, dtypes, devices, options)
# custom op name -> torch's own op for the same arguments, which ``measure`` checks and times Tracea's against;
# ``custom_op`` fills it where compile_backend.py defines each custom op.
_TORCH_OPS: dict[str, Callable[..., Any]] = {}


def custom_op(name: str, theirs: Callable[..., Any]) -> Callable[[Callable[..., Any]], Any]:
    """``torch.library.custom_op("tracea::<name>")``, recording ``theirs`` as torch's own op for it."""
    _TORCH_OPS[name] = theirs
    return torch.library.custom_op(f"tracea::{name}", mutates_args=())


@dataclass
class Choice:
    """Whether a node of this signature becomes a Tracea op, and the measurement behind it (ms)."""

    tracea: bool
    reason: str
    tracea_ms: float | None = None
    torch_ms: float | None = None


def static_shapes(t: torch.Tensor) -> bool:
    """Every size and stride of ``t`` a plain int (no symbolic size: dynamic=True)."""
    return all(type(d) is int for d in (*t.shape, *t.stride()))


def _signature(kind: str, values: tuple[Any, ...]) -> tuple[Any, ...]:
    return (kind, *((("t", tuple(v.shape), tuple(v.stride()), v.dtype, str(v.device)) if isinstance(v, torch.Tensor)
                     else (type(v).__name__, repr(v))) for v in values))


def _real(t: Any, gen: torch.Generator | None) -> Any:
    """A real tensor of ``t``'s shape, strides (a broadcast's zero strides too), dtype and device: a view of a
    storage of unit normals scaled by its fan-in."""
    if not isinstance(t, torch.Tensor):
        return t
    shape, stride = tuple(t.shape), tuple(t.stride())
    n = 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, stride, strict=True))
    storage = torch.empty(n, dtype=t.dtype, device=t.device)
    if storage.is_floating_point():
        fan = t.shape[-1] if t.dim() else 1
        storage.normal_(0.0, 1.0 / max(1.0, float(fan)) ** 0.25, generator=gen)
    return storage.as_strided(shape, stride)


HOLD_CYCLES = 2_000_000  # ~1 ms of GPU clocks: the host queues the events and the op before the GPU gets there


def _median_ms(fn: Callable[[], Any], device: torch.device, repeats: int = 15, hold: bool = True) -> float:
    """The op's median time: on a GPU, each call between two events; with ``hold`` the stream is held busy
    before them (``torch.cuda._sleep``), so the figure is the device time alone, as in ``tracea bench``;
    without, the GPU waits for the host, so a call's host time (a Python custom op's is larger than an aten
    op's) counts where the kernel is shorter. On the CPU the wall time of a call."""
    import statistics
    import time

    for _ in range(3):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        pairs = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if hold:
                torch.cuda._sleep(HOLD_CYCLES)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(device)
        return statistics.median(s.elapsed_time(e) for s, e in pairs)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


GRAPH_CALLS = 10  # calls of the node in the CUDA graph that times it for graph trees


def _graph_ms(fn: Callable[[], Any], device: torch.device, repeats: int = 15, calls: int = GRAPH_CALLS) -> float:
    """The op's median time a call inside a CUDA graph of ``calls`` back-to-back calls, as a replay of
    Inductor's graph trees runs it: no host time, no launch gaps but the graph's own, warm caches (a call timed
    alone starts on an idle GPU: on an H200 at batch 1, a bias-free 1x1 convolution took 3.3 us a call in such
    a graph against cuDNN's 2.8, benchmarks/gpu/graph_launch_probe.py)."""
    import statistics

    from tracea.emitters import graph_held

    for _ in range(3):
        fn()
    torch.cuda.synchronize(device)
    with graph_held.measuring():  # the kernels this graph keeps alive are let go with it
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, capture_error_mode="thread_local"):
                for _ in range(calls):
                    fn()
            g.replay()
            torch.cuda.synchronize(device)
            pairs = []
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                g.replay()
                end.record()
                pairs.append((start, end))
            torch.cuda.synchronize(device)
        finally:
            del g
    return statistics.median(s.elapsed_time(e) for s, e in pairs) / calls


def measure(kind: str, examples: tuple[Any, ...], graphed: bool = False) -> Choice:
    """Run ``kind`` on real tensors shaped like ``examples`` through Tracea's custom op and torch's own op:
    the results compared, each timed; the Choice (kept per signature in ``CHOICES``). ``graphed``: the graph is
    replayed as a CUDA graph (Inductor's CUDA graph trees), so only device time counts; otherwise each call's
    time with the GPU waiting for the host must pass the margin too (its host time is paid at every call)."""
    key = (*_signature(kind, examples), graphed)
    got = CHOICES.get(key)
    if got is not None:
        return got
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from . import explain
    from ._engine import STATS

    with unset_fake_temporarily(), torch.no_grad():
        device = next(t.device for t in examples if isinstance(t, torch.Tensor))
        mine = getattr(torch.ops.tracea, kind).default
        theirs = _TORCH_OPS[kind]
        fallbacks = STATS["fallbacks"]
        try:
            gen = torch.Generator(device=device).manual_seed(0)
            args = tuple(_real(t, gen) for t in examples)
            y = mine(*args)
        except Exception as exc:  # noqa: BLE001 - whatever stops Tracea's op keeps torch's
            choice = Choice(False, f"Tracea's op failed here ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
        else:
            route = explain()
            if STATS["fallbacks"] != fallbacks or route.path != "tracea":
                why = route.reason if route.path == "fallback" else "it falls back"
                choice = Choice(False, f"the kernel path falls back ({why})")
            else:
                want = theirs(*args).float()
                err = float((y.float() - want).norm() / max(float(want.norm()), 1e-30))
                if not err < 2e-2:  # a wrong answer is never swapped in
                    choice = Choice(False, f"Tracea's result differs from torch's (relative error {err:.2g})")
                else:
                    timer, how = _median_ms, ""
                    if graphed and device.type == "cuda":
                        timer, how = _graph_ms, f" a call in a CUDA graph of {GRAPH_CALLS}"
                    try:
                        t_ms = timer(lambda: mine(*args), device)
                        v_ms = timer(lambda: theirs(*args), device)
                    except Exception as exc:  # noqa: BLE001 - a capture that fails: timed alone instead
                        how = f" (alone: a CUDA graph of the call failed, {type(exc).__name__})"
                        t_ms = _median_ms(lambda: mine(*args), device)
                        v_ms = _median_ms(lambda: theirs(*args), device)
                    faster = t_ms <= MARGIN * v_ms
                    why = f"Tracea {t_ms:.4f} ms, torch {v_ms:.4f} ms{how}"
                    if faster and device.type == "cuda" and not graphed:
                        tc = _median_ms(lambda: mine(*args), device, hold=False)
                        vc = _median_ms(lambda: theirs(*args), device, hold=False)
                        faster = tc <= MARGIN * vc
                        why += f"; a call with its host time: Tracea {tc:.4f} ms, torch {vc:.4f} ms"
                    choice = Choice(faster, why + ("" if faster else f" (not under {MARGIN:g}x torch's)"), t_ms, v_ms)
    CHOICES[key] = choice
    return choice


def prebuild(pending: list[tuple[str, tuple[Any, ...]]]) -> None:
    """Build the kernels of the signatures about to be measured, several at once, and wait for them."""
    start_prebuild(pending)()


def start_prebuild(pending: list[tuple[str, tuple[Any, ...]]]) -> Callable[[], None]:
    """Start building the kernels of the signatures about to be measured, several at once (threads: NVRTC
    and gcc run outside the GIL, and tracea.ops builds different kernels in parallel), so that a graph's first
    compile waits for the longest build rather than their sum, and the builds run while Inductor compiles
    (compile_backend). Returns the wait for them. A failure here is left to ``measure``."""
    todo = {_signature(kind, ex): (kind, ex) for kind, ex in pending}
    todo = {k: v for k, v in todo.items() if k not in CHOICES}
    if not todo:
        return lambda: None
    from concurrent.futures import ThreadPoolExecutor

    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def run(kind: str, examples: tuple[Any, ...]) -> None:
        try:
            with unset_fake_temporarily(), torch.no_grad():
                device = next(t.device for t in examples if isinstance(t, torch.Tensor))
                if device.type == "cuda":
                    torch.cuda.set_device(device)
                args = tuple(_real(t, None) for t in examples)
                getattr(torch.ops.tracea, kind).default(*args)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001 - measure() meets the same failure and says it
            pass

    pool = ThreadPoolExecutor(max_workers=min(8, len(todo)), thread_name_prefix="tracea-build")
    futures = [pool.submit(run, *item) for item in todo.values()]

    def wait() -> None:
        for f in futures:
            f.result()
        pool.shutdown()

    return wait


def unmeasured(pending: list[tuple[str, tuple[Any, ...]]], graphed: bool) -> bool:
    """Whether any of these signatures has no choice yet (the compile would build and measure)."""
    return any((*_signature(kind, ex), graphed) not in CHOICES for kind, ex in pending)
