"""What the kernels of a batch-1 ResNet-50 CUDA graph are, and what makes Tracea's slower inside one
(issue 31: the patched graph replays at 0.96-0.98x PyTorch's at batch 1 when both are timed in one state of the
process, while each of its convolutions in ``tracea bench``, launched one by one on a stream, is at 0.9-1.2x).

    python benchmarks/gpu/graph_kernel_probe.py --attrs      # each graph's kernels: smem, registers, carveout, edges
    python benchmarks/gpu/graph_kernel_probe.py --switch     # cost of a kernel of large shared memory between small ones
    python benchmarks/gpu/graph_kernel_probe.py --distinct   # 60 trivial kernels from K modules or K functions of one
    python benchmarks/gpu/graph_kernel_probe.py --forms      # batch-1 1x1 convs: schedules in a graph of ten vs cuDNN
    python benchmarks/gpu/graph_kernel_probe.py --forms --swap   # ... the heuristic against swapped operands
    python benchmarks/gpu/graph_kernel_probe.py --forms --threes # batch-1 3x3 and strided convs: tiles and splits
    python benchmarks/gpu/graph_kernel_probe.py --forms --threes --batch 8  # ... at batch 8, beside the prior hero
    python benchmarks/gpu/graph_kernel_probe.py --order      # the same graph captured 8 times: does the Nth run slower?

Every device figure is a replay from an idle GPU (drained before each; the median of 30) or, "queued", 20
replays back to back (the mean); CUDA events. The graphs compared in one table are captured first and then
timed in turns (``timed_in_turns``): a process's graphs all ran about 100 us (13 %) slower on an H200 once it
had captured four ResNet-50 graphs (``--order``), so a graph timed right after its capture would be compared
with one timed in another state. ``--forms`` checks each schedule's output against
``F.conv2d`` on fresh random inputs before timing it. Needs a GPU, PyTorch, torchvision and cuda-bindings.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_launch_probe import TRIVIAL, capture, replay_times  # noqa: E402

import tracea  # noqa: E402


def _d():
    from cuda.bindings import driver as d

    return d


def _ok(ret):
    """cuda-bindings returns (CUresult, values...): the values, or RuntimeError with the error's name."""
    err, *rest = ret if isinstance(ret, tuple) else (ret,)
    if int(err) != 0:
        raise RuntimeError(f"{err}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def queued(g: torch.cuda.CUDAGraph, rounds: int = 20) -> float:
    """Device us per replay with ``rounds`` replays queued back to back."""
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(rounds):
        g.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / rounds


def resnet(batch: int = 1):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16).contiguous(
        memory_format=torch.channels_last)
    return model, x


def kernel_nodes(g: torch.cuda.CUDAGraph) -> list[tuple[object, object]]:
    """(node, CUDA_KERNEL_NODE_PARAMS) of every kernel node of ``g`` (captured with its graph kept)."""
    d = _d()
    raw = d.CUgraph(g.raw_cuda_graph())
    n = _ok(d.cuGraphGetNodes(raw, 0))[1]
    nodes = _ok(d.cuGraphGetNodes(raw, n))[0]
    out = []
    for node in nodes[:n]:
        if _ok(d.cuGraphNodeGetType(node)) == d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
            out.append((node, _ok(d.cuGraphKernelNodeGetParams(node))))
    return out


def edge_kinds(g: torch.cuda.CUDAGraph) -> str:
    """The graph's edges by dependency type (programmatic edges are programmatic dependent launch)."""
    d = _d()
    get = getattr(d, "cuGraphGetEdges_v2", None) or d.cuGraphGetEdges  # CUDA 13: the edge data is in the base call
    try:
        raw = d.CUgraph(g.raw_cuda_graph())
        n = get(raw, 0)[-1]
        got = get(raw, n)
        if len(got) < 5:
            return f"{n} (types not given by this cuda-bindings)"
        kinds: dict[str, int] = {}
        for e in got[3][:n]:
            k = str(getattr(e, "type", "?")).split(".")[-1]
            kinds[k] = kinds.get(k, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none"
    except Exception as exc:  # noqa: BLE001 - a probe: say why and go on
        return f"(not read: {type(exc).__name__}: {str(exc)[:80]})"


def _attr(func, name: str) -> int | str:
    d = _d()
    try:
        return int(_ok(d.cuFuncGetAttribute(getattr(d.CUfunction_attribute, name), func)))
    except Exception:  # noqa: BLE001
        return "?"


def _name(func) -> str:
    d = _d()
    try:
        raw = _ok(d.cuFuncGetName(func))
        return (raw.decode() if isinstance(raw, bytes) else str(raw))[:60]
    except Exception:  # noqa: BLE001
        return f"func {int(func):#x}"


def functions(g: torch.cuda.CUDAGraph) -> dict[int, dict]:
    """Each distinct function of ``g``'s kernel nodes: name, nodes, dynamic smem, static smem, registers,
    threads, preferred carveout, and the handle."""
    funcs: dict[int, dict] = {}
    for _, p in kernel_nodes(g):
        f = p.func
        row = funcs.setdefault(int(f), {"func": f, "name": _name(f), "nodes": 0, "dyn": set(), "grid": set()})
        row["nodes"] += 1
        row["dyn"].add(int(p.sharedMemBytes))
        row["grid"].add((int(p.gridDimX) * int(p.gridDimY) * int(p.gridDimZ), int(p.blockDimX) * int(p.blockDimY)))
    for row in funcs.values():
        f = row["func"]
        row["static"] = _attr(f, "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        row["regs"] = _attr(f, "CU_FUNC_ATTRIBUTE_NUM_REGS")
        row["carveout"] = _attr(f, "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT")
    return funcs


def _smem(r: dict) -> int:
    return max(r["dyn"]) + (r["static"] if isinstance(r["static"], int) else 0)


def attrs() -> None:
    """Both batch-1 graphs' kernels: distinct functions with their shared memory, registers and carveout."""
    model, x = resnet(1)
    for side in ("PyTorch", "patch_conv2d"):
        if side == "patch_conv2d":
            tracea.ops.patch_conv2d(model)
        g = capture(lambda: model(x), 1, keep=True)
        funcs = functions(g)
        big = sum(r["nodes"] for r in funcs.values() if _smem(r) > 48 * 1024)
        print(f"\n--- {side}: {sum(r['nodes'] for r in funcs.values())} kernel nodes, {len(funcs)} distinct "
              f"functions, {big} nodes over 48 KiB of shared memory; edges: {edge_kinds(g)}")
        print("| function | nodes | dynamic smem | static smem | regs | carveout | blocks x threads |")
        print("|---|---|---|---|---|---|---|")
        for r in sorted(funcs.values(), key=lambda r: -r["nodes"]):
            grids = sorted(r["grid"])
            shown = ", ".join(f"{b}x{t}" for b, t in grids[:3]) + (" ..." if len(grids) > 3 else "")
            print(f"| {r['name']} | {r['nodes']} | {sorted(r['dyn'])[:4]} | {r['static']} | {r['regs']} | "
                  f"{r['carveout']} | {shown} |")
    tracea.ops.unpatch_conv2d(model)


def _trivial_functions(count: int, smem: int = 0) -> list[int]:
    """``count`` handles of the trivial kernel, each from its own loaded module (as Tracea loads its kernels)."""
    from cuda.core import Device, ObjectCode, Program, ProgramOptions

    d = _d()
    dev = Device()
    dev.set_current()
    cc = dev.compute_capability
    cubin = bytes(Program(TRIVIAL, "c++", ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}")).compile("cubin").code)
    out = []
    for _ in range(count):
        k = ObjectCode.from_cubin(cubin).get_kernel("tr_probe_nop")
        _trivial_functions.keep.append(k)  # type: ignore[attr-defined]
        h = k._handle if hasattr(k, "_handle") else k.handle
        if isinstance(h, d.CUkernel):
            h = _ok(d.cuKernelGetFunction(h))
        if smem:
            _ok(d.cuFuncSetAttribute(h, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
        out.append(int(h))
    return out


_trivial_functions.keep = []  # type: ignore[attr-defined]


def _raw(fn: int, smem: int = 0, blocks: int = 132) -> None:
    import numpy as np

    from tracea.emitters.cuda import launches

    launches.kernel(fn, blocks, 128, smem, torch.cuda.current_stream().cuda_stream, [np.uint64(0)])


def timed_in_turns(graphs: dict[str, torch.cuda.CUDAGraph], rounds: int = 30) -> dict[str, tuple[float, float]]:
    """(median idle device us over ``rounds``, queued us over 20) of each captured graph, timed in turns: every
    graph in the same state of the process (``order``: a process's graphs all slow down once it has captured a
    few, so a graph timed right after its capture may be compared with one timed in another state)."""
    import statistics

    idle: dict[str, list[float]] = {k: [] for k in graphs}
    for _ in range(rounds):
        for k, g in graphs.items():
            idle[k].append(replay_times(g.replay, rounds=1)[1])
    return {k: (statistics.median(idle[k]), queued(g)) for k, g in graphs.items()}


def in_turns(cases: dict[str, object]) -> list[str]:
    """Each case's graph captured, then all timed in turns: rows | label | device us, idle | queued |."""
    times = timed_in_turns({label: capture(fn, 1) for label, fn in cases.items()})
    return [f"| {k} | {idle:.1f} | {q:.1f} |" for k, (idle, q) in times.items()]


def switch() -> None:
    """A kernel that asks for 144 KiB of shared memory between PyTorch's elementwise kernels, against the same
    kernel asking for none: what a change of the SMs' carveout costs in a graph (graphs timed in turns)."""
    big = 144 * 1024
    f_small = _trivial_functions(1)[0]
    f_big = _trivial_functions(1, smem=big)[0]
    buf = torch.zeros(1 << 16, device="cuda", dtype=torch.float16)
    cases = {
        "60 x trivial (0 smem)": lambda: [_raw(f_small) for _ in range(60)],
        "60 x trivial (144 KiB smem)": lambda: [_raw(f_big, big) for _ in range(60)],
        "30 x (trivial 0 smem, add_)": lambda: [(_raw(f_small), buf.add_(1)) for _ in range(30)],
        "30 x (trivial 144 KiB smem, add_)": lambda: [(_raw(f_big, big), buf.add_(1)) for _ in range(30)],
        "30 x (trivial 144 KiB smem, trivial 0 smem)": lambda: [(_raw(f_big, big), _raw(f_small)) for _ in range(30)],
    }
    print("\n| graph | device us, idle | device us, queued |")
    print("|---|---|---|")
    print("\n".join(in_turns(cases)), flush=True)


def _one_module_functions(count: int) -> list[int]:
    """``count`` distinct trivial kernels compiled into one module."""
    from cuda.core import Device, ObjectCode, Program, ProgramOptions

    d = _d()
    dev = Device()
    dev.set_current()
    cc = dev.compute_capability
    src = "\n".join(f'extern "C" __global__ void tr_probe_nop_{i}(int* p) {{ if (p) p[0] = {i}; }}' for i in range(count))
    obj = ObjectCode.from_cubin(bytes(Program(src, "c++", ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}")).compile("cubin").code))
    _trivial_functions.keep.append(obj)  # type: ignore[attr-defined]
    out = []
    for i in range(count):
        h = obj.get_kernel(f"tr_probe_nop_{i}")
        h = h._handle if hasattr(h, "_handle") else h.handle
        out.append(int(_ok(d.cuKernelGetFunction(h)) if isinstance(h, d.CUkernel) else h))
    return out


def distinct() -> None:
    """Graphs of 60 trivial kernels drawn in turn from K separately loaded modules, and from K distinct
    functions of one module: whether modules or functions make a graph slower (graphs timed in turns)."""
    funcs, ones = _trivial_functions(60), _one_module_functions(60)
    cases = {}
    for k in (1, 2, 4, 6, 8, 16, 60):
        for what, pool in (("modules", funcs[:k]), ("functions of one module", ones[:k])):
            cases[f"{k} {what}"] = lambda pool=pool: [_raw(pool[i % len(pool)], 0, 1) for i in range(60)]
    print("\n| 60 trivial kernels from K | device us, idle | device us, queued |")
    print("|---|---|---|")
    print("\n".join(in_turns(cases)), flush=True)


def order() -> None:
    """Whether a graph's speed depends on how many graphs the process captured before it: ResNet-50's batch-1
    graph captured again and again, PyTorch's and the patched one in turn, each timed right after its capture
    (and all of them again at the end); then the same with each graph freed before the next is captured."""
    import gc

    model, x = resnet(1)
    print("\n| capture | graph | kept alive | device us, idle | queued | idle, re-timed at the end |")
    print("|---|---|---|---|---|---|")
    for keep in (True, False):
        kept: list[tuple[int, str, torch.cuda.CUDAGraph, float, float]] = []
        for n in range(8):
            side = "patch_conv2d" if n % 2 else "PyTorch"
            (tracea.ops.patch_conv2d if n % 2 else tracea.ops.unpatch_conv2d)(model)
            g = capture(lambda: model(x), 1)
            idle, q = replay_times(g.replay)[1], queued(g)
            if keep:
                kept.append((n + 1, side, g, idle, q))
            else:
                print(f"| {n + 1} | {side} | no | {idle:.1f} | {q:.1f} | |", flush=True)
                del g
                gc.collect()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        for n, side, g, idle, q in kept:
            print(f"| {n} | {side} | yes | {idle:.1f} | {q:.1f} | {replay_times(g.replay)[1]:.1f} |", flush=True)
        kept.clear()
        gc.collect()
        torch.cuda.empty_cache()
    tracea.ops.unpatch_conv2d(model)


ONES_B1 = [(64, 56, 64), (64, 56, 256), (256, 56, 64), (256, 56, 128), (128, 28, 512), (512, 28, 128),
           (512, 28, 256), (256, 14, 1024), (1024, 14, 256), (1024, 14, 512), (512, 7, 2048), (2048, 7, 512)]


# ResNet-50's batch-1 convolutions that are not plain GEMMs: (C, HW, K, filter, stride), padding filter // 2
THREES_B1 = [(64, 56, 64, 3, 1), (128, 56, 128, 3, 2), (128, 28, 128, 3, 1), (256, 28, 256, 3, 2),
             (256, 14, 256, 3, 1), (512, 14, 512, 3, 2), (512, 7, 512, 3, 1), (256, 56, 512, 1, 2),
             (512, 28, 1024, 1, 2), (1024, 14, 2048, 1, 2)]
GEOM = {"stride": 1, "padding": 0}  # the stride and padding of the shape --forms is on


def _conv(x, w):
    return tracea.ops.conv2d(x, w, **GEOM)


def _pin(x, w, schedule) -> str:
    """Route the next ``tracea.ops.conv2d(x, w)`` through ``schedule`` (None: the heuristic's); its kernel."""
    from tracea.ops import _engine

    tracea.ops.clear_cache()
    if schedule is not None:
        _conv(x, w)
        ((key, (variant, _, _)),) = _engine._CHOICES.items()
        tracea.ops.clear_cache()
        _engine._CHOICES[key] = (variant, schedule, "pinned")
    _conv(x, w)
    return tracea.ops.explain().kernel


SWAP = False  # --swap: the heuristic and swapped-operand forms, on the shapes of at most 784 pixels
THREES = False  # --threes: the 3x3 and strided convs, im2col tiles and splits


BATCH = [1]  # --batch: the batch of the --threes shapes


def prior_hero(c: int, hw: int, k: int, f: int, stride: int):
    """The heuristic's schedule before ``few_pixels_im2col`` (0df931a) for that conv at ``BATCH``."""
    from tracea.emitters.cuda.hopper import conv_heroes
    from tracea.kernels import Conv2d

    op = Conv2d(n=BATCH[0], c=c, h=hw, w=hw, k=k, r=f, s=f, stride=stride, padding=f // 2, layout="nhwc",
                dtype="fp16")
    rule, conv_heroes.few_pixels_im2col = conv_heroes.few_pixels_im2col, lambda *a: None
    try:
        return conv_heroes.conv_hero_schedule(op)
    finally:
        conv_heroes.few_pixels_im2col = rule


def three_forms() -> list:
    """im2col forms for few pixels: 64 x 64, 64 x 128 and 128 x 64 tiles, each whole and split-K (planned); past
    batch 1 only 64 x 64 whole and split (beside the heuristic and the one before it)."""
    from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule

    if BATCH[0] > 1:
        return [WgmmaConvSchedule(bm=64, bn=64, stages=6, consumers=1, store="tma", path="im2col", split=sp)
                for sp in (1, 0)]

    one = [WgmmaConvSchedule(bm=64, bn=bn, stages=6, consumers=1, store="tma", path="im2col", split=sp)
           for bn in (64, 128) for sp in (1, 0)]
    two = [WgmmaConvSchedule(bm=128, bn=64, stages=6, consumers=2, pingpong=True, store="tma", path="im2col",
                             split=sp) for sp in (1, 0)]
    return one + two + [dataclasses.replace(one[0], stages=4), dataclasses.replace(one[1], stages=4)]


def _forms(hero, prior=None) -> list:
    r = dataclasses.replace
    if SWAP:
        return list(dict.fromkeys([hero] + swap_forms()))
    if THREES:
        return list(dict.fromkeys([hero] + ([prior] if prior is not None else []) + three_forms()))
    forms = [hero] + [r(hero, stages=s) for s in (2, 3, 4)]
    forms += [r(hero, bn=128, stages=4), r(hero, bn=128, stages=2), r(hero, split=2, stages=4),
              r(hero, persistent=False, stages=4), r(hero, store="direct", stages=4), r(hero, l2_hint="first")]
    return list(dict.fromkeys(forms))


def swap_forms() -> list:
    """Swapped operands (C^T's tiles: 64 filters x bn pixels), bn 8-64, without and with split-K."""
    from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule

    return [WgmmaConvSchedule(bm=64, bn=bn, stages=8, consumers=1, store="tma", split=sp, swap=True, path="gemm")
            for bn in (8, 16, 32, 64) for sp in (1, 0)]


def _form_graph(x, w, s) -> tuple[torch.cuda.CUDAGraph | None, str, str]:
    """(a graph of ten calls of ``tracea.ops.conv2d(x, w)`` through schedule ``s``, its kernel, its relative
    error against F.conv2d on fresh inputs); no graph where the output is wrong or the schedule fails. The
    graph's last output is kept in ``OUTS[graph]`` to be checked again after the timing."""
    try:
        kern = _pin(x, w, s)
        x2 = torch.randn_like(x)
        want = F.conv2d(x2, w, **GEOM)
        err = ((_conv(x2, w) - want).abs().max() / want.abs().max()).item()
        if not err < 1e-2:
            return None, kern, f"wrong: rel err {err:.2e}"
        held: list[torch.Tensor] = []

        def ten() -> None:
            held[:] = [_conv(x, w) for _ in range(10)][-1:]

        g = capture(ten, 1)
        OUTS[g] = held[0]
        return g, kern, f"{err:.1e}"
    except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
        return None, "", f"failed: {type(exc).__name__}: {str(exc)[:90]}"


OUTS: dict[torch.cuda.CUDAGraph, torch.Tensor] = {}


def _after(g, want) -> str:
    """The graph's output after its timed replays against ``want``: a scratch buffer freed or shared while the
    graph lived would show here."""
    err = ((OUTS.pop(g).float() - want.float()).abs().max() / want.float().abs().max()).item()
    return f"{err:.1e}" if err < 1e-2 else f"WRONG after timing: {err:.2e}"


def forms() -> None:
    """ResNet-50's batch-1 1x1 convolutions (``--threes``: its 3x3 and strided ones): the heuristic schedule and
    a few others, each checked against F.conv2d, then timed in graphs of ten calls beside cuDNN's graph of ten
    (all of one shape in turns)."""
    from tracea.ops import _engine

    h = torch.float16
    tracea.ops.allow_fallback(False)  # a schedule that cannot run raises instead of timing cuDNN under its name
    print("\n| conv (C, HW, K, filter/stride) | schedule | kernel | idle us / call | cuDNN idle | idle ratio | queued ratio | err; after timing |")
    print("|---|---|---|---|---|---|---|---|")
    for c, hw, k, f, stride in THREES_B1 if THREES else [(*shape, 1, 1) for shape in ONES_B1]:
        if SWAP and hw * hw > 784:
            continue
        GEOM.update(stride=stride, padding=f // 2)
        x = torch.randn(BATCH[0], c, hw, hw, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
        w = (torch.randn(k, c, f, f, device="cuda", dtype=h) / (c * f * f) ** 0.5).contiguous(
            memory_format=torch.channels_last)
        graphs = {"cuDNN": capture(lambda x=x, w=w: [F.conv2d(x, w, **GEOM) for _ in range(10)], 1)}
        _pin(x, w, None)
        hero = next(iter(_engine._CHOICES.values()))[1]
        notes = {}
        prior = prior_hero(c, hw, k, f, stride) if THREES else None
        for s in _forms(hero, prior):
            label = "heuristic" if s == hero else ("prior heuristic: " if s == prior else "") + _diff(hero, s)
            g, kern, note = _form_graph(x, w, s)
            notes[label] = (kern, note)
            if g is not None:
                graphs[label] = g
        times = timed_in_turns(graphs)
        torch.cuda.synchronize()
        want = F.conv2d(x, w, **GEOM)
        after = {label: _after(g, want) for label, g in graphs.items() if label != "cuDNN"}
        v = times.pop("cuDNN")
        for label, (kern, note) in notes.items():
            if label not in times:
                print(f"| {c},{hw},{k},{f}/{stride} | {label} | {kern} | {note} | | | | |", flush=True)
                continue
            t = times[label]
            print(f"| {c},{hw},{k},{f}/{stride} | {label} | {kern} | {t[0] / 10:.2f} | {v[0] / 10:.2f} | {t[0] / v[0]:.2f} | "
                  f"{t[1] / v[1]:.2f} | {note}; {after[label]} |", flush=True)
    tracea.ops.clear_cache()
    tracea.ops.allow_fallback(True)


def _diff(a, b) -> str:
    return ", ".join(f"{f.name}={getattr(b, f.name)}" for f in dataclasses.fields(b)
                     if getattr(a, f.name) != getattr(b, f.name))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("attrs", "switch", "distinct", "forms", "order"):
        ap.add_argument(f"--{flag}", action="store_true")
    ap.add_argument("--swap", action="store_true", help="--forms: the heuristic against swapped-operand forms")
    ap.add_argument("--threes", action="store_true", help="--forms: the 3x3 and strided convs, tiles and splits")
    ap.add_argument("--batch", type=int, default=1, help="--threes: the convs' batch (1)")
    args = ap.parse_args(argv)
    BATCH[0] = args.batch
    global SWAP, THREES
    SWAP, THREES = args.swap, args.threes
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    with torch.inference_mode():
        for flag in ("order", "attrs", "switch", "distinct", "forms"):
            if getattr(args, flag):
                try:
                    globals()[flag]()
                except Exception as exc:  # noqa: BLE001 - one part failing leaves the others to run
                    import traceback

                    print(f"\n{flag} failed: {type(exc).__name__}: {exc}")
                    traceback.print_exc()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
