"""torchvision's ResNet-50 as users have it (fp16, channels_last, eval, inference mode), run by PyTorch (cuDNN)
and after ``tracea.ops.patch_conv2d(model)``: eager, and each captured in a CUDA graph and replayed. The
outputs are compared first (relative error of the logits against PyTorch's), then each form is timed with
CUDA events around each forward (median and p95 of ``--repeats``, after warm-up), which counts the GPU time
the host leaves idle. The two graphs of a batch are captured first and then timed in turn
(``timed_pair``): a process's graphs all slow down together once it has captured a few. The counts say how
many convolutions ran a Tracea kernel and how many fell back.

    python benchmarks/gpu/ops_resnet50.py [--batch 32 1] [--repeats 30] [--turns] [--kernels] [--layers]

``--turns``: the eager forwards of PyTorch's model (an unpatched copy) and the patched one timed in turns, as the
graphs are, and the count of calls that took Tracea's slow path (a new signature or new pointers) while timed.

``--kernels``: each CUDA graph's kernels under torch.profiler (CUPTI) over ten replays: GPU time per forward
by kernel name, their sum, and the forward's span, whose difference is the time the GPU spent between
kernels. ``--layers``: the same profiles cut at the kernels both graphs share (PyTorch's batch norm, ReLU, add,
pooling, linear), so each convolution's kernels in one graph stand beside its kernels in the other: device time
and the idle gap before them, per convolution shape (median over the replays), Tracea minus cuDNN.

Needs a GPU, PyTorch and torchvision.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from collections.abc import Callable

import torch
import torchvision

import tracea

UNSTABLE = 1.5


def forward_ms(fn: Callable[[], object]) -> float:
    """One call of ``fn`` between two CUDA events, ms (the GPU time the host leaves idle counted)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def median_p95(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]


def timed_pair(a: Callable[[], object], b: Callable[[], object], repeats: int) -> tuple[tuple[float, float], ...]:
    """(median, p95) ms of ``a`` and of ``b``, timed in turn (a, b, a, b, ...) after five of warm-up each, so
    that both run in the same state of the process. On an H200 every CUDA graph of a process, PyTorch's own
    included, ran about 100 us (13 %) slower once the process had captured four ResNet-50 graphs
    (graph_kernel_probe.py --order, docs/device-runs/h200-graph-kernel-modules/): two graphs timed one after
    the other with a capture between them compare two states, not two models."""
    for _ in range(5):
        a()
        b()
    torch.cuda.synchronize()
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(forward_ms(a))
        tb.append(forward_ms(b))
    return median_p95(ta), median_p95(tb)


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, p95) ms of ``repeats`` calls after five of warm-up."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    return median_p95([forward_ms(fn) for _ in range(repeats)])


DUMP: list[str] = []  # --dump FOLDER: each captured graph as Graphviz (cudaGraphDebugDotPrint, verbose)


def graphed(fn: Callable[[], torch.Tensor], name: str = "graph") -> tuple[Callable[[], None], torch.Tensor]:
    for _ in range(3):  # kernels built and launches prepared outside the capture
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    if DUMP:
        g.enable_debug_mode()
    with torch.cuda.graph(g):
        y = fn()
    if DUMP:
        import os

        g.debug_dump(os.path.join(DUMP[0], f"{name}.dot"))
    return g.replay, y


def kernel_table(label: str, replay: Callable[[], None], replays: int = 10, top: int = 20) -> str:
    """The kernels of ``replays`` graph replays (torch.profiler): per forward, by name, and their sum."""
    import time
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    replay()
    torch.cuda.synchronize()
    host = []
    for _ in range(replays):  # the host's share: how long the replay call itself takes (the graph's launch)
        t = time.perf_counter()
        replay()
        host.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(replays):  # back to back: the next replay's launch overlaps this one's run
        replay()
    b.record()
    b.synchronize()
    queued = a.elapsed_time(b) * 1e3 / replays
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            replay()
        torch.cuda.synchronize()
    by_name: dict[str, list[float]] = defaultdict(list)
    spans = []
    for ev in prof.events():
        if ev.device_type.name != "CUDA" or ev.device_time_total <= 0:
            continue
        by_name[ev.name].append(ev.device_time_total)
        spans.append((ev.time_range.start, ev.time_range.end))
    total = sum(sum(v) for v in by_name.values()) / replays
    span = (max(e for _, e in spans) - min(s for s, _ in spans)) / replays if spans else 0.0
    lines = [f"--- {label}: {sum(len(v) for v in by_name.values()) // replays} kernels a forward, {total:.1f} us of "
             f"kernel time, {span:.1f} us from the first start to the last end (a replay's share); the replay call "
             f"itself {statistics.median(host):.1f} us of host time; {queued:.1f} us a replay, {replays} queued back to "
             "back"]
    for name, v in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]:
        lines.append(f"  {sum(v) / replays:8.1f} us  {len(v) // replays:3d} x  {name[:110]}")
    return "\n".join(lines)


def _kernel_runs(replay: Callable[[], None], replays: int = 10) -> list[list[tuple[float, float, str]]]:
    """Each replay's kernels as (start us, end us, name), in the order they ran."""
    from torch.profiler import ProfilerActivity, profile

    replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            replay()
            torch.cuda.synchronize()
    evs = sorted((ev.time_range.start, ev.time_range.end, ev.name) for ev in prof.events()
                 if ev.device_type.name == "CUDA" and ev.device_time_total > 0)
    n = len(evs) // replays
    return [evs[i * n:(i + 1) * n] for i in range(replays)]


def _conv_segments(run: list[tuple[float, float, str]], shared: set[str]) -> list[tuple[float, float]]:
    """(kernel us, idle us before the first) of each maximal stretch of kernels not in ``shared``."""
    out, prev_end, cur = [], None, None
    for start, end, name in run:
        if name in shared:
            cur = None
        else:
            if cur is None:
                cur = [0.0, start - prev_end if prev_end is not None else 0.0]
                out.append(cur)
            cur[0] += end - start
        prev_end = end
    return [tuple(c) for c in out]


def layer_table(replay_t: Callable[[], None], replay_m: Callable[[], None], shapes: list[str]) -> str:
    """Per convolution shape: cuDNN's and Tracea's kernel time and the idle gap before them, in the graphs."""
    runs_t, runs_m = _kernel_runs(replay_t), _kernel_runs(replay_m)
    shared = {n for *_, n in runs_t[0]} & {n for *_, n in runs_m[0]}
    seg_t = [_conv_segments(r, shared) for r in runs_t]
    seg_m = [_conv_segments(r, shared) for r in runs_m]
    if {len(s) for s in seg_t + seg_m} != {len(shapes)}:
        return (f"--- layers: cannot pair ({len(shapes)} convolutions, {len(seg_t[0])} cuDNN stretches, "
                f"{len(seg_m[0])} Tracea stretches)")
    rows: dict[str, list[float]] = {}
    for i, shape in enumerate(shapes):
        t = [statistics.median(s[i][j] for s in seg_t) for j in (0, 1)]
        m = [statistics.median(s[i][j] for s in seg_m) for j in (0, 1)]
        acc = rows.setdefault(shape, [0, 0.0, 0.0, 0.0, 0.0])
        acc[0] += 1
        for j, v in enumerate(t + m):
            acc[1 + j] += v
    lines = ["--- layers (median of 10 replays; us summed over a shape's convolutions; cuDNN | Tracea)",
             "| conv (c_in x h x w -> c_out, k, stride) | n | cuDNN kernels | gap | Tracea kernels | gap | Tracea - cuDNN |",
             "|---|---|---|---|---|---|---|"]
    tot = [0.0] * 4
    for shape, (n, kt, gt, km, gm) in sorted(rows.items(), key=lambda kv: -(kv[1][3] + kv[1][4] - kv[1][1] - kv[1][2])):
        tot = [a + b for a, b in zip(tot, (kt, gt, km, gm), strict=True)]
        lines.append(f"| {shape} | {n} | {kt:.1f} | {gt:.1f} | {km:.1f} | {gm:.1f} | {km + gm - kt - gt:+.1f} |")
    lines.append(f"| all | {len(shapes)} | {tot[0]:.1f} | {tot[1]:.1f} | {tot[2]:.1f} | {tot[3]:.1f} | "
                 f"{tot[2] + tot[3] - tot[0] - tot[1]:+.1f} |")
    return "\n".join(lines + _shared_table(runs_t, runs_m, shared))


def _shared_table(runs_t: list, runs_m: list, shared: set[str]) -> list[str]:
    """The kernels both graphs run (PyTorch's own), by name: us per forward in each graph (median over the
    replays), and each replay's span from the first start to the last end."""
    def per_name(runs: list) -> dict[str, float]:
        got: dict[str, list[float]] = {}
        for run in runs:
            acc: dict[str, float] = {}
            for start, end, name in run:
                if name in shared:
                    acc[name] = acc.get(name, 0.0) + end - start
            for name, v in acc.items():
                got.setdefault(name, []).append(v)
        return {name: statistics.median(v) for name, v in got.items()}

    t, m = per_name(runs_t), per_name(runs_m)
    span_t = statistics.median(r[-1][1] - r[0][0] for r in runs_t)
    span_m = statistics.median(r[-1][1] - r[0][0] for r in runs_m)
    lines = [f"--- PyTorch's kernels in both graphs: {sum(t.values()):.1f} us with cuDNN, {sum(m.values()):.1f} us "
             f"with Tracea; a forward's span {span_t:.1f} / {span_m:.1f} us", "| kernel | cuDNN graph | Tracea graph |",
             "|---|---|---|"]
    for name in sorted(t, key=lambda n: -abs(m.get(n, 0.0) - t[n]))[:6]:
        lines.append(f"| {name[:90]} | {t[name]:.1f} | {m.get(name, 0.0):.1f} |")
    return lines


def conv_shapes(model: torch.nn.Module, x: torch.Tensor) -> list[str]:
    """Each convolution of one forward, in call order, as c_in x h x w -> c_out, k, stride."""
    shapes: list[str] = []

    def hook(mod, args, _out):
        h, w = args[0].shape[-2:]
        shapes.append(f"{mod.in_channels}x{h}x{w} -> {mod.out_channels}, {mod.kernel_size[0]}, {mod.stride[0]}")

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    model(x)
    for h in hooks:
        h.remove()
    return shapes


def ratio(theirs: tuple[float, float], mine: tuple[float, float]) -> str:
    if theirs[1] > UNSTABLE * theirs[0] or mine[1] > UNSTABLE * mine[0]:
        return "unstable"
    return f"{theirs[0] / mine[0]:.2f}x"


def one_batch(model: torch.nn.Module, theirs: torch.nn.Module | None, batch: int, args: argparse.Namespace,
              kernels: list[str]) -> list[str]:
    """The table's rows for one batch. ``theirs``: an unpatched copy of ``model`` (``--turns``), so that the eager
    forwards are timed in turns with the patched ones (else PyTorch's first, then Tracea's)."""
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    tracea.ops.unpatch_conv2d(model)
    torch_model = theirs if theirs is not None else model
    want = torch_model(x).float()
    eager_t = timed(lambda: torch_model(x), args.repeats) if theirs is None else None
    replay_t_fn, y_t = graphed(lambda: torch_model(x), f"torch_b{batch}")
    tracea.ops.patch_conv2d(model)
    tracea.ops.clear_cache()
    got = model(x).float()
    stats = tracea.ops.stats()
    err = float((got - want).norm() / want.norm())
    slow = stats.get("slow_path", 0)
    if theirs is None:
        eager_m = timed(lambda: model(x), args.repeats)
    else:
        eager_t, eager_m = timed_pair(lambda: theirs(x), lambda: model(x), args.repeats)
    slow = tracea.ops.stats().get("slow_path", 0) - slow  # calls that took the slow path while timed
    replay_m_fn, y_m = graphed(lambda: model(x), f"tracea_b{batch}")
    graph_t, graph_m = timed_pair(replay_t_fn, replay_m_fn, args.repeats)  # both graphs in one state
    torch.cuda.synchronize()
    gerr = float((y_m.float() - y_t.float()).norm() / y_t.float().norm())
    if args.kernels:
        kernels.append(kernel_table(f"batch {batch}, PyTorch (cuDNN), CUDA graph", replay_t_fn))
        kernels.append(kernel_table(f"batch {batch}, patch_conv2d, CUDA graph", replay_m_fn))
    if args.layers:
        kernels.append(f"batch {batch}:\n" + layer_table(replay_t_fn, replay_m_fn, conv_shapes(model, x)))
    tracea.ops.unpatch_conv2d(model)
    form = "eager, in turns" if theirs is not None else "eager"
    return [f"| {batch} | {form} | {eager_t[0]:.3f} / {eager_t[1]:.3f} | {eager_m[0]:.3f} / {eager_m[1]:.3f} "
            f"| {ratio(eager_t, eager_m)} | {err:.1e} | {stats.get('tracea', 0)} Tracea, "
            f"{stats.get('fallbacks', 0)} fallbacks (first forward); {slow} slow-path calls while timed |",
            f"| {batch} | CUDA graph | {graph_t[0]:.3f} / {graph_t[1]:.3f} | {graph_m[0]:.3f} / "
            f"{graph_m[1]:.3f} | {ratio(graph_t, graph_m)} | {gerr:.1e} | |"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 1])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--turns", action="store_true", help="time the eager forwards in turns with an unpatched copy")
    ap.add_argument("--kernels", action="store_true", help="each CUDA graph's kernels under torch.profiler")
    ap.add_argument("--layers", action="store_true", help="each convolution's kernels in both graphs, side by side")
    ap.add_argument("--dump", metavar="FOLDER", help="write each captured graph as Graphviz (debug mode)")
    args = ap.parse_args(argv)
    if args.dump:
        DUMP.append(args.dump)
    kernels: list[str] = []
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    theirs = copy.deepcopy(model) if args.turns else None
    rows = []
    with torch.inference_mode():
        for batch in args.batch:
            rows += one_batch(model, theirs, batch, args, kernels)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, torchvision {torchvision.__version__}")
    print(f"torchvision resnet50, fp16, channels_last, inference; ms per forward, median / p95 of {args.repeats}\n")
    print("| batch | form | PyTorch (cuDNN) | patch_conv2d | PyTorch / Tracea | rel. err of the logits | convs |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if kernels:
        print("\n" + "\n".join(kernels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
