"""Where a split-K Hopper GEMM's time goes, block by block: each schedule is built, verified and timed as
`bench` does (CUDA events, L2 flushed, stream held), then run once more from a copy of its source that
stamps %globaltimer and clock64 at fixed points of every block (entry, first stage landed, mainloop done,
partial parked, slices summed, exit), and the spread of those stamps is printed.

    python benchmarks/gpu/split_timeline.py [--shape 512x512x16384] [--runs 5]

A diagnostic, not a figure: the stamped copy is never the timed kernel. Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from tracea.doctor import probe
from tracea.emitters.cuda import compiler as nv
from tracea.emitters.cuda.baselines import time_torch, torch_baseline
from tracea.emitters.cuda.build import build
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule, hero_schedule
from tracea.emitters.cuda.tma import Launcher
from tracea.kernels import Gemm
from tracea.kernels.dtypes import to_float64

SLOTS = 16  # per block: globaltimer at points 0..5, clock64 at points 0..5 (8..13), the SM id (15)
POINTS = ("entry", "first stage", "mainloop done", "parked", "summed", "exit")

STAMP_LIB = r"""__device__ unsigned long long tr_tl[4096 * 16];
static __device__ __forceinline__ void tr_stamp(int p) {
    unsigned long long g, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    tr_tl[blockIdx.x * 16 + p] = g;
    tr_tl[blockIdx.x * 16 + 8 + p] = c;
}
"""

# (marker line in the rendered source, text put after it)
HOOKS = [
    ("const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;",
     "    if (threadIdx.x == 0) { unsigned sm; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm)); "
     "tr_tl[blockIdx.x * 16 + 15] = sm; tr_stamp(0); }\n    int tr_first = 1;"),
    ("                tr_mbar_wait(bars + 8u * s, phase);",
     "                if (tr_first && threadIdx.x == 128) { tr_stamp(1); tr_first = 0; }"),
    ("            TR_WGMMA_WAIT(0);", "            if (threadIdx.x == 128) tr_stamp(2);"),
]
BEFORE = [
    ("                if (!last) continue;", "                if (threadIdx.x == 128) tr_stamp(3);"),
    ("            /* wgmma m64nN accumulator layout", "            if (threadIdx.x == 128 && sidx >= 0) tr_stamp(4);"),
]
AFTER_EXIT = ("        if (tid == 0) asm volatile(\"cp.async.bulk.wait_group.read 0;\\n\" ::: \"memory\");",
              "        if (threadIdx.x == 128) tr_stamp(5);")


def stamped(source: str) -> str:
    lines = source.split("\n")
    out: list[str] = []
    kernel_at = next(i for i, ln in enumerate(lines) if ln.startswith('extern "C" __global__'))
    for i, ln in enumerate(lines):
        if i == kernel_at:
            out.extend(STAMP_LIB.split("\n"))
        for mark, text in BEFORE:
            if ln.strip().startswith(mark.strip()) and "tr_unit(" in source:
                out.append(text)
        out.append(ln)
        for mark, text in HOOKS + [AFTER_EXIT]:
            if ln.strip() == mark.strip():
                out.append(text)
    return "\n".join(out)


def timeline(kernel, inputs: dict[str, np.ndarray], runs: int) -> list[np.ndarray]:
    """Stamps of ``runs`` launches of the stamped copy (each after a flush and a hold), one array each."""
    from cuda.bindings import driver as drv

    src = stamped(kernel.artifact.source)
    cubin = nv.compile_cached(src, kernel.artifact.name + "_tl", kernel.rendered.entry, "sm_90a")[0]
    kernel._launcher = Launcher(cubin.read_bytes(), kernel.rendered.entry, kernel.rendered.smem)
    ptr, size = nv_global(drv, kernel._launcher.module)
    kernel.upload(inputs)
    dev = kernel._dev
    got = []
    for _ in range(runs):
        drv.cuMemsetD8Async(ptr, 0, size, dev.stream.handle)
        dev.flush_l2()
        dev.hold(500_000)
        kernel.launch()
        dev.stream.sync()
        host = np.zeros(size // 8, dtype=np.uint64)
        drv.cuMemcpyDtoH(host.ctypes.data, ptr, size)
        got.append(host.reshape(-1, SLOTS)[: kernel._grid].astype(np.int64))
    return got


def nv_global(drv, module) -> tuple[int, int]:
    err, ptr, size = drv.cuModuleGetGlobal(module, b"tr_tl")
    assert int(err) == 0, err
    return ptr, size


def summarize(t: np.ndarray) -> str:
    """One line per point: when blocks got there (µs after the first entry), and the per-block
    durations between points in SM cycles."""
    g = t[:, :6].astype(float)
    base = g[:, 0][g[:, 0] > 0].min()
    rows = []
    for p, name in enumerate(POINTS):
        have = g[:, p] > 0
        if not have.any():
            continue
        at = (g[have, p] - base) / 1000.0
        rows.append(f"    {name:<14} n={int(have.sum()):>3}  at µs min {at.min():6.2f}  med {np.median(at):6.2f}  "
                    f"max {at.max():6.2f}")
    c = t[:, 8:14].astype(float)
    for a, b in ((0, 1), (1, 2), (2, 3), (3, 4), (2, 5), (0, 5)):
        have = (c[:, a] > 0) & (c[:, b] > 0)
        if have.any():
            d = c[have, b] - c[have, a]
            rows.append(f"    cycles {POINTS[a]} -> {POINTS[b]:<14} n={int(have.sum()):>3}  min {d.min():8.0f}  "
                        f"med {np.median(d):8.0f}  max {d.max():8.0f}")
    both = (g[:, 0] > 0) & (g[:, 5] > 0) & (c[:, 0] > 0) & (c[:, 5] > 0)
    if both.any():
        ghz = (c[both, 5] - c[both, 0]) / np.maximum(g[both, 5] - g[both, 0], 1)
        rows.append(f"    SM clock over the kernel: {np.median(ghz):.2f} GHz (median of blocks)")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="512x512x16384")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=".", help="folder for the raw stamps (.npy)")
    ap.add_argument("--only", default="", help="forms whose label holds this text")
    ap.add_argument("--once", default="", help="one form (its label's first word) and cuBLAS, 2 launches each (ncu)")
    args = ap.parse_args()
    m, n, k = (int(x) for x in args.shape.split("x"))
    op = Gemm(m, n, k, "bf16")
    host = probe()
    rng = np.random.default_rng(7)
    inputs = op.random_inputs(rng)
    ref = op.reference(inputs).astype(np.float64)
    base = torch_baseline(op, inputs)
    hero = hero_schedule(op)
    forms = [("hero", hero),
             ("s8 split4", WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma", split=4)),
             ("split2 (64 blocks)", WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=2)),
             ("split1 (32 blocks)", WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=1)),
             ("pair shares B", WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, store="tma", split=4)),
             ("cuBLAS's form", WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", cluster=2,
                                             cluster_axis="n", store="tma", split=4)),
             ("128x64 c2", WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", store="tma", split=4)),
             ("128x128 split8", WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", split=8)),
             # the cluster fix-up: a tile's slices sum over distributed shared memory
             ("cluster-fix", WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=4,
                                           split_fix="cluster")),
             ("cluster-fix s7", WgmmaSchedule(bm=64, bn=128, stages=7, consumers=1, store="tma", split=4,
                                              split_fix="cluster")),
             ("cluster-fix 128x64", WgmmaSchedule(bm=128, bn=64, stages=6, consumers=2, raster="n", store="tma",
                                                  split=4, split_fix="cluster")),
             ("cluster-fix 128x128/8", WgmmaSchedule(bm=128, bn=128, stages=4, consumers=2, store="tma", split=8,
                                                     split_fix="cluster"))]
    if args.once:
        sched = next(f for label, f in forms if label.split()[0] == args.once)
        kern = build(op, "cuda-wgmma.gemm", sched, host)
        err = float(np.abs(to_float64(kern(inputs), op.dtype) - ref).max()) / float(np.abs(ref).max())
        print(f"{args.once} {sched.name}: err {err:.1e}", flush=True)
        for _ in range(2):
            kern.launch()
            base.run()
        kern._dev.stream.sync()
        return
    scale = float(np.abs(ref).max())
    for label, sched in forms:
        if args.only not in label:
            continue
        kern = build(op, "cuda-wgmma.gemm", sched, host)
        out = to_float64(kern(inputs), op.dtype)
        err = float(np.abs(out - ref).max()) / scale
        ok = err < 2e-2
        tr = kern.time(inputs, warmup=5, repeats=30)
        vt = time_torch(base.run, 5, 30)
        print(f"{label:<20} {sched.name:<40} grid {kern._grid:>3}  err {err:.1e} {'ok' if ok else 'WRONG'}  "
              f"{tr.p50_ms * 1000:6.1f} µs (p95 {tr.p95_ms * 1000:6.1f})  cuBLAS {vt.p50_ms * 1000:6.1f} µs  "
              f"ratio {vt.p50_ms / tr.p50_ms:.3f}", flush=True)
        if not ok:
            continue
        runs = timeline(kern, inputs, args.runs)
        ends = [float(((r[:, 5][r[:, 5] > 0]).max() - r[:, 0][r[:, 0] > 0].min()) / 1000) for r in runs]
        pick = runs[int(np.argsort(ends)[len(ends) // 2])]
        print(f"  stamped copy: entry-to-last-exit µs over {args.runs} runs {[round(e, 1) for e in ends]} "
              f"(median {statistics.median(ends):.1f}); the median run:")
        print(summarize(pick), flush=True)
        np.save(f"{args.out}/{label.split()[0]}_{sched.name}.npy", np.stack(runs))


if __name__ == "__main__":
    main()
