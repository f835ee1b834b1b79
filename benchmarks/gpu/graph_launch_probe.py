"""How long the host takes to launch a CUDA graph of Tracea kernels against one of PyTorch's: for each of a
few batch-1 ResNet-50 convolutions (a 1x1 on the GEMM kernel, a 3x3 with split-K scratch, the 7x7 stem), a
graph of ``--calls`` calls of ``tracea.ops.conv2d`` and one of ``F.conv2d`` on the same tensors; printed:
the host time of ``replay()`` (median of 20, the GPU drained in between) and the device time of a replay.
A patched ResNet-50 at batch 1 took 63-74 us of host time to launch its graph against PyTorch's 5-7 us
(``ops_resnet50.py --kernels``): this says which kernels make a graph slow to launch.

    python benchmarks/gpu/graph_launch_probe.py [--calls 50] [--resnet [BATCH]]

``--resnet``: torchvision's ResNet-50 (fp16, channels_last) at that batch (1 by default), captured whole by
PyTorch and after ``patch_conv2d`` (with the gaps between kernels of a replay from an idle GPU, by the kernels
around them); then its 53 convolutions alone, in order on the inputs a forward gave them,
on each side; then each convolution alone in a graph of ten. Each graph's node types are counted (cuda.bindings
on the captured graph, where this torch keeps it) and its replay is also launched by ``cuGraphLaunch`` itself,
so that PyTorch's ``replay()`` wrapper and the driver's launch are told apart.

``--modules N...``: PyTorch's own ResNet-50 batch-1 graph, launched after loading N copies of a trivial kernel
(one module each, as Tracea loads its kernels), for each N in turn: whether loaded modules slow every graph's
launch.

``--matrix``: graphs of about 60 kernels, one property changed at a time (one buffer or many, parameter bytes,
Tracea's kernels alone or between PyTorch's, clusters, split-K scratch): which of them makes a launch slow.

``--interleaved``: PyTorch's own ResNet-50 batch-1 graph with a trivial kernel after each convolution, of 16
or 4008 bytes of parameters: whether parameter bytes in a whole model's graph make its launch slow.

``--subsets``: ResNet-50's batch-1 graph with only some of its convolutions on Tracea (the first k, the 1x1
ones, the others): which of them make its launch slow.

Needs a GPU and PyTorch (and torchvision for ``--resnet``, ``--modules``, ``--interleaved``, ``--subsets``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import tracea

CASES = {  # (x NCHW shape, out channels, kernel, stride, padding)
    "1x1 56x56 64->256 (GEMM kernel)": ((1, 64, 56, 56), 256, 1, 1, 0),
    "3x3 s2 56x56 128 (split-K scratch)": ((1, 128, 56, 56), 128, 3, 2, 1),
    "7x7 s2 stem 3->64": ((1, 3, 224, 224), 64, 7, 2, 3),
}


def capture(fn, calls: int, keep: bool = False) -> torch.cuda.CUDAGraph:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph(keep_graph=keep)
    except TypeError:  # an older torch: no template kept
        g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def replay_times(launch, rounds: int = 20) -> tuple[float, float]:
    """(median host us of ``launch()``, median device us from an event before it to one after), the GPU
    drained before each."""
    host, dev = [], []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t = time.perf_counter()
        launch()
        host.append((time.perf_counter() - t) * 1e6)
        b.record()
        b.synchronize()
        dev.append(a.elapsed_time(b) * 1e3)
    return statistics.median(host), statistics.median(dev)


def probe(fn, calls: int) -> tuple[float, float]:
    return replay_times(capture(fn, calls).replay)


def node_types(g: torch.cuda.CUDAGraph) -> str:
    """The captured graph's nodes by type ("kernel 280, memset 0, ..."), or why they cannot be counted."""
    try:
        from cuda.bindings import driver as d

        raw = d.CUgraph(g.raw_cuda_graph())
        err, _, n = d.cuGraphGetNodes(raw, 0)  # cuda-bindings: (graph, how many) -> (error, nodes, count)
        err, nodes, n = d.cuGraphGetNodes(raw, n)
        counts: dict[str, int] = {}
        for node in nodes[:n]:
            err, kind = d.cuGraphNodeGetType(node)
            name = kind.name.replace("CU_GRAPH_NODE_TYPE_", "").lower()
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    except Exception as exc:  # noqa: BLE001 - a probe: say why and go on
        return f"(not counted: {type(exc).__name__}: {exc})"


def driver_launch(g: torch.cuda.CUDAGraph):
    """``cuGraphLaunch`` of ``g``'s executable graph on the current stream, or None where torch does not expose it."""
    try:
        from cuda.bindings import driver as d

        exe = d.CUgraphExec(g.raw_cuda_graph_exec())
        stream = d.CUstream(torch.cuda.current_stream().cuda_stream)
        return lambda: d.cuGraphLaunch(exe, stream)
    except Exception:  # noqa: BLE001
        return None


def idle_gaps(label: str, g: torch.cuda.CUDAGraph, replays: int = 5, top: int = 8) -> str:
    """Where a replay from an idle GPU spends its time (torch.profiler, the GPU drained before each of
    ``replays``): its span, its kernels' sum, and the largest gaps between consecutive kernels, by the pair of
    kernels around them (mean per replay)."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            torch.cuda.synchronize()
            g.replay()
            torch.cuda.synchronize()
    evs = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                 if e.device_type.name == "CUDA" and e.device_time_total > 0)
    n = len(evs) // replays
    gaps: dict[tuple[str, str], float] = defaultdict(float)
    spans, busy, idle = [], [], []
    for r in range(replays):
        seg = evs[r * n:(r + 1) * n]
        spans.append(seg[-1][1] - seg[0][0])
        busy.append(sum(e - s for s, e, _ in seg))
        idle.append(spans[-1] - busy[-1])
        for (_, e0, n0), (s1, _, n1) in zip(seg, seg[1:], strict=False):
            gaps[(n0[:48], n1[:48])] += (s1 - e0) / replays
    lines = [f"--- {label}: {n} kernels a replay; span {statistics.median(spans):.1f} us, kernels "
             f"{statistics.median(busy):.1f} us, gaps {statistics.median(idle):.1f} us (medians of {replays} replays "
             "from an idle GPU); the largest gaps by the kernels around them, us per replay:"]
    for (a, b), us in sorted(gaps.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {us:7.1f}  {a}  ->  {b}")
    return "\n".join(lines)


def launch_cost(launch, rounds: int = 200) -> str:
    """Where ``launch()``'s host time goes, per call over ``rounds`` (the GPU drained before each): user and
    system CPU time of this thread and minor page faults (getrusage), e.g. driver calls into the kernel."""
    import resource

    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    user = sys_ = faults = wall = 0.0
    for _ in range(rounds):
        torch.cuda.synchronize()
        r0, t0 = resource.getrusage(who), time.perf_counter()
        launch()
        t1, r1 = time.perf_counter(), resource.getrusage(who)
        wall += t1 - t0
        user += r1.ru_utime - r0.ru_utime
        sys_ += r1.ru_stime - r0.ru_stime
        faults += r1.ru_minflt - r0.ru_minflt
    torch.cuda.synchronize()
    return (f"wall {wall / rounds * 1e6:.1f} us, user {user / rounds * 1e6:.1f} us, system {sys_ / rounds * 1e6:.1f} "
            f"us, {faults / rounds:.2f} minor faults per launch")


def graph_row(label: str, fn, calls: int = 1, gaps: list[str] | None = None) -> str:
    g = capture(fn, calls, keep=True)
    try:
        g.instantiate()
    except Exception:  # noqa: BLE001 - instantiated at capture's end in an older torch
        pass
    g.replay()
    torch.cuda.synchronize()
    host, dev = replay_times(g.replay)
    launch = driver_launch(g)
    drv = f"{replay_times(launch)[0]:.1f}" if launch is not None else "n/a"
    if gaps is not None:
        gaps.append(idle_gaps(label, g))
        gaps.append(f"    cuGraphLaunch of {label}: "
                    + (launch_cost(launch) if launch is not None else launch_cost(g.replay)))
    return f"| {label} | {host:.1f} | {drv} | {dev:.1f} | {node_types(g)} |"


TRIVIAL = 'extern "C" __global__ void tr_probe_nop(int* p) { if (p) p[0] = 1; }'


def modules(counts: list[int]) -> None:
    """Whether loading modules makes every graph slower to launch: PyTorch's own ResNet-50 batch-1 graph,
    launched after more and more copies of a trivial kernel are loaded as Tracea loads its kernels
    (``cuda.core.ObjectCode.from_cubin``, one library each), nothing of Tracea's in the graph itself."""
    import torchvision
    from cuda.core import Device, Program, ProgramOptions

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    g = capture(lambda: model(x), 1)
    dev = Device()
    dev.set_current()
    cc = dev.compute_capability
    cubin = Program(TRIVIAL, "c++", ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}")).compile("cubin").code
    from cuda.core import ObjectCode

    kept = []
    print("\n| trivial modules loaded | kernels fetched from them | PyTorch graph replay() host us | device us |")
    print("|---|---|---|---|")
    for n in counts:
        while len(kept) < n:
            kept.append(ObjectCode.from_cubin(bytes(cubin)).get_kernel("tr_probe_nop"))
        host, dev_us = replay_times(g.replay)
        print(f"| {n} | {len(kept)} | {host:.1f} | {dev_us:.1f} |", flush=True)


BIG = """struct Big { long long v[500]; };
extern "C" __global__ void tr_probe_big(Big b, int* p) { if (p) p[0] = (int)b.v[0]; }
"""


def _function(source: str, name: str) -> int:
    """A CUfunction handle of ``name`` in ``source``, compiled by NVRTC and loaded as Tracea loads its kernels."""
    from cuda.bindings import driver as d
    from cuda.core import Device, ObjectCode, Program, ProgramOptions

    dev = Device()
    dev.set_current()
    cc = dev.compute_capability
    cubin = Program(source, "c++", ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}")).compile("cubin").code
    kernel = ObjectCode.from_cubin(bytes(cubin)).get_kernel(name)
    _function.keep.append(kernel)  # type: ignore[attr-defined]
    handle = kernel._handle if hasattr(kernel, "_handle") else kernel.handle
    if isinstance(handle, d.CUkernel):
        handle = d.cuKernelGetFunction(handle)[1]
    return int(handle)


_function.keep = []  # type: ignore[attr-defined]


def _matrix_cases(nodes: int) -> list[tuple[str, object]]:
    """``matrix``'s graphs: (label, the calls captured)."""
    import ctypes

    import numpy as np
    import torch.nn.functional as F

    from tracea.emitters.cuda import launches

    h = torch.float16
    one = torch.zeros(1 << 16, device="cuda", dtype=h)
    bufs = [torch.zeros(1 << 16, device="cuda", dtype=h) for _ in range(nodes)]
    small = _function(TRIVIAL, "tr_probe_nop")
    big = _function(BIG, "tr_probe_big")

    class Big(ctypes.Structure):
        _fields_ = [("v", ctypes.c_longlong * 500)]

    big_arg = Big()

    def raw(fn: int, args: list) -> None:
        launches.kernel(fn, 1, 32, 0, torch.cuda.current_stream().cuda_stream, args)

    x1 = torch.randn(1, 64, 56, 56, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
    w1 = torch.randn(256, 64, 1, 1, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
    x3 = torch.randn(1, 128, 28, 28, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
    w3 = torch.randn(128, 128, 3, 3, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
    xc = torch.randn(1, 64, 56, 56, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
    wc = torch.randn(64, 64, 3, 3, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
    half = nodes // 2
    cases = [
        (f"{nodes} add_ on one buffer", lambda: [one.add_(1) for _ in range(nodes)]),
        (f"{nodes} add_, each on its own buffer", lambda: [b.add_(1) for b in bufs]),
        (f"{nodes} b + 1, each a new buffer of the graph's pool", lambda: [b + 1 for b in bufs]),
        (f"{nodes} trivial kernels, 16 bytes of parameters", lambda: [raw(small, [np.uint64(0)]) for _ in range(nodes)]),
        (f"{nodes} trivial kernels, 4008 bytes of parameters",
         lambda: [raw(big, [big_arg, np.uint64(0)]) for _ in range(nodes)]),
        (f"{nodes} Tracea 1x1 convs (GEMM kernel, b1 56x56 64->256)",
         lambda: [tracea.ops.conv2d(x1, w1) for _ in range(nodes)]),
        (f"{nodes} cuDNN 1x1 convs (same)", lambda: [F.conv2d(x1, w1) for _ in range(nodes)]),
        (f"{half} x (Tracea 1x1 conv, relu_)", lambda: [tracea.ops.conv2d(x1, w1).relu_() for _ in range(half)]),
        (f"{half} x (cuDNN 1x1 conv, relu_)", lambda: [F.conv2d(x1, w1).relu_() for _ in range(half)]),
        (f"{nodes} Tracea 3x3 split-K convs (b1 28x28 128)", lambda: [tracea.ops.conv2d(x3, w3, padding=1)
                                                                     for _ in range(nodes)]),
        (f"{nodes} Tracea 3x3 convs, cluster of 2 (b1 56x56 64)", lambda: [tracea.ops.conv2d(xc, wc, padding=1)
                                                                           for _ in range(nodes)]),
        (f"{half} x (Tracea 3x3 split-K conv, relu_)", lambda: [tracea.ops.conv2d(x3, w3, padding=1).relu_()
                                                                for _ in range(half)]),
    ]
    return cases


def matrix(nodes: int = 60) -> None:
    """What makes a graph slow to launch: graphs of about ``nodes`` kernels, one property changed at a time
    (buffers, parameter bytes, Tracea's kernels alone or between PyTorch's, clusters, split-K scratch)."""
    cases = _matrix_cases(nodes)
    print(f"\nGraphs of about {nodes} kernels, one property changed at a time: host us of replay() and of "
          "cuGraphLaunch, device us of a replay (GPU drained before each)\n")
    print("| graph | replay() host | cuGraphLaunch host | device | kernel |")
    print("|---|---|---|---|---|")
    for label, fn in cases:
        try:
            fn()
            kernel = tracea.ops.explain().kernel if "Tracea" in label else ""
            print(graph_row(label, fn).rsplit("|", 2)[0] + f"| {kernel} |", flush=True)
        except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
            print(f"| {label} | failed: {type(exc).__name__}: {str(exc)[:100]} | | | |", flush=True)


def interleaved() -> None:
    """Whether the bytes of kernel parameters in a whole model's graph make it slow to launch: PyTorch's own
    ResNet-50 batch-1 graph, captured with a trivial kernel launched after each of its 53 convolutions, once
    with 16 bytes of parameters and once with 4008 (Tracea's Hopper kernels pass their tensor maps, 128 bytes
    each, by value)."""
    import ctypes

    import numpy as np
    import torchvision

    from tracea.emitters.cuda import launches

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    small, big = _function(TRIVIAL, "tr_probe_nop"), _function(BIG, "tr_probe_big")

    class Big(ctypes.Structure):
        _fields_ = [("v", ctypes.c_longlong * 500)]

    big_arg = Big()
    extra = {"none": None, "16 bytes": (small, [np.uint64(0)]), "4008 bytes": (big, [big_arg, np.uint64(0)])}
    print("\n| PyTorch ResNet-50 b1 graph, after each conv a trivial kernel with | replay() host | cuGraphLaunch host "
          "| device | nodes |")
    print("|---|---|---|---|---|")
    for label, launch in extra.items():
        hooks = []
        if launch is not None:
            fn, args = launch
            hook = lambda m, a, y, fn=fn, args=args: launches.kernel(  # noqa: E731
                fn, 1, 32, 0, torch.cuda.current_stream().cuda_stream, args)
            hooks = [c.register_forward_hook(hook) for c in model.modules() if isinstance(c, torch.nn.Conv2d)]
        print(graph_row(label, lambda: model(x)), flush=True)
        for h in hooks:
            h.remove()


def subsets() -> None:
    """Which of the patched convolutions make ResNet-50's batch-1 graph slow to launch: the graph with only
    some of its 53 convolutions on Tracea (the first k; only the 1x1 ones; only the others), each captured
    anew."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    picks = {f"first {k}": convs[:k] for k in (0, 1, 4, 10, 20, 35, 53)}
    picks["the 1x1 ones"] = [c for c in convs if c.kernel_size == (1, 1)]
    picks["all but the 1x1 ones"] = [c for c in convs if c.kernel_size != (1, 1)]
    print("\n| convolutions on Tracea | replay() host | cuGraphLaunch host | device | nodes |")
    print("|---|---|---|---|---|")
    for label, chosen in picks.items():
        tracea.ops.unpatch_conv2d(model)
        for c in chosen:
            tracea.ops.TraceaConv2d.from_conv(c)
        print(graph_row(f"{label} ({len(chosen)})", lambda: model(x)), flush=True)
    tracea.ops.unpatch_conv2d(model)


def resnet(batch: int) -> None:
    """ResNet-50's graph, its convolutions' graph and each convolution's, on both sides (see the docstring)."""
    import os

    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(
        memory_format=torch.channels_last)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    inputs: list[torch.Tensor] = []
    hooks = [c.register_forward_pre_hook(lambda m, a: inputs.append(a[0])) for c in convs]
    model(x)
    for h in hooks:
        h.remove()
    pairs = list(zip(convs, inputs, strict=True))
    print(f"\nResNet-50 batch {batch}, fp16 channels_last; CUDA_MODULE_LOADING="
          f"{os.environ.get('CUDA_MODULE_LOADING', '(unset)')}; host us of replay() and of cuGraphLaunch, "
          "device us of a replay (GPU drained before each)\n")
    print("| graph | replay() host | cuGraphLaunch host | device | nodes |")
    print("|---|---|---|---|---|")
    gaps: list[str] = []
    print(graph_row("PyTorch, whole model", lambda: model(x), gaps=gaps), flush=True)
    print(graph_row(f"PyTorch, the {len(convs)} convs alone", lambda: [c(i) for c, i in pairs]))
    alone_t = [probe(lambda c=c, i=i: c(i), 10) for c, i in pairs]
    tracea.ops.patch_conv2d(model)
    print(graph_row("patch_conv2d, whole model", lambda: model(x), gaps=gaps), flush=True)
    print("\n" + "\n".join(gaps), flush=True)
    print(graph_row(f"patch_conv2d, the {len(convs)} convs alone", lambda: [c(i) for c, i in pairs]))
    print("\nEach convolution alone, a graph of ten calls: host us of replay() (PyTorch / Tracea), Tracea's kernel\n")
    print("| conv | shape | PyTorch host | Tracea host | Tracea kernel | Tracea device / PyTorch device |")
    print("|---|---|---|---|---|---|")
    for n, (c, i, t) in enumerate(zip(convs, inputs, alone_t, strict=True)):
        m = probe(lambda c=c, i=i: c(i), 10)
        route = tracea.ops.explain(c, i)
        shape = f"{tuple(i.shape)} {c.out_channels}x{c.kernel_size[0]}x{c.kernel_size[1]} s{c.stride[0]}"
        print(f"| {n} | {shape} | {t[0]:.1f} | {m[0]:.1f} | {getattr(route, 'kernel', None)} | "
              f"{m[1] / t[1]:.2f} |", flush=True)
    tracea.ops.unpatch_conv2d(model)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--resnet", type=int, nargs="?", const=1, metavar="BATCH",
                    help="ResNet-50's graphs at this batch (1 if no number is given)")
    ap.add_argument("--modules", type=int, nargs="+", metavar="N",
                    help="PyTorch's ResNet-50 graph launched after loading N trivial modules (each N in turn)")
    ap.add_argument("--matrix", action="store_true",
                    help="graphs of 60 kernels, one property changed at a time (what makes a launch slow)")
    ap.add_argument("--interleaved", action="store_true",
                    help="PyTorch's ResNet-50 graph with a trivial kernel of 16 or 4008 parameter bytes after each conv")
    ap.add_argument("--subsets", action="store_true",
                    help="ResNet-50's b1 graph with only some convolutions on Tracea (which make the launch slow)")
    args = ap.parse_args(argv)
    chosen = [(args.subsets, subsets, ()), (args.interleaved, interleaved, ()), (args.matrix, matrix, ()),
              (bool(args.modules), modules, (args.modules,)), (args.resnet is not None, resnet, (args.resnet,))]
    for wanted, probe_fn, probe_args in chosen:
        if wanted:
            with torch.inference_mode():
                probe_fn(*probe_args)
            return 0
    h = torch.float16
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; a graph of {args.calls} calls: host time "
          "of replay(), us; device time of a replay, us\n")
    print("| conv | side | kernel | replay() host | replay device |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for label, (shape, k, r, s, p) in CASES.items():
            x = torch.randn(*shape, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
            w = torch.randn(k, shape[1], r, r, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
            ours = lambda x=x, w=w, s=s, p=p: tracea.ops.conv2d(x, w, None, s, p)  # noqa: E731
            theirs = lambda x=x, w=w, s=s, p=p: F.conv2d(x, w, None, s, p)  # noqa: E731
            ours()
            kernel = tracea.ops.explain().kernel
            for side, fn, name in (("tracea", ours, kernel), ("torch", theirs, "cuDNN")):
                hu, du = probe(fn, args.calls)
                print(f"| {label} | {side} | {name} | {hu:.1f} | {du:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
