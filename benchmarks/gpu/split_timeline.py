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
from tracea.emitters import nvrtc as nv
from tracea.emitters.cuda.build import build
from tracea.emitters.cuda.hopper.gemm_heroes import gemm_hero_schedule
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule
from tracea.emitters.cuda.tma import Launcher
from tracea.emitters.device_baselines import time_torch, torch_baseline
from tracea.kernels import Gemm
from tracea.kernels.dtypes import to_float64

SLOTS = 24  # per block: globaltimer at points 0..9, clock64 at points 0..9 (10..19), the SM id (23)
POINTS = ("entry", "first stage", "mainloop done", "parked", "summed", "exit", "fix: ticket", "fix: others parked",
          "", "")

STAMP_LIB = r"""__device__ unsigned long long tr_tl[4096 * 24];
static __device__ __forceinline__ void tr_stamp(int p) {
    unsigned long long g, c;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
    tr_tl[blockIdx.x * 24 + p] = g;
    tr_tl[blockIdx.x * 24 + 10 + p] = c;
}
"""

# (text a line of the rendered source holds, "before" or "after" it, the stamp put there). Thread 128 (the
# first consumer thread, the fix-ups' leader) stamps.
HOOKS = [
    ("const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;", "after",
     "    if (threadIdx.x == 0) { unsigned sm; asm volatile(\"mov.u32 %0, %%smid;\" : \"=r\"(sm)); "
     "tr_tl[blockIdx.x * 24 + 23] = sm; tr_stamp(0); }\n    int tr_first = 1;"),
    ("tr_mbar_wait(bars + 8u * s, phase);", "after", "if (tr_first && threadIdx.x == 128) { tr_stamp(1); tr_first = 0; }"),
    ("TR_WGMMA_WAIT(0);", "after", "if (threadIdx.x == 128) tr_stamp(2);"),
    ("if (!last) continue;", "before", "if (threadIdx.x == 128) tr_stamp(3);"),
    ("/* wgmma m64nN accumulator layout", "before", "if (threadIdx.x == 128 && sidx >= 0) tr_stamp(4);"),
    ('asm volatile("cp.async.bulk.wait_group.read 0;', "after", "if (threadIdx.x == 128) tr_stamp(5);"),
    # the last-unit fix-up: its ticket read, the others parked
    ('asm volatile("ld.shared.b32 %0, [%1];', "after", "if (threadIdx.x == 128) tr_stamp(6);"),
    ("every other slice has parked", "after", "tr_stamp(7);"),
]


def stamped(source: str) -> str:
    lines = source.split("\n")
    out: list[str] = []
    kernel_at = next(i for i, ln in enumerate(lines) if ln.startswith('extern "C" __global__'))
    for i, ln in enumerate(lines):
        if i == kernel_at:
            out.extend(STAMP_LIB.split("\n"))
        indent = ln[: len(ln) - len(ln.lstrip())]
        hooks = [h for h in HOOKS if "sidx" not in h[2] or "tr_unit(" in source]
        out.extend(indent + text for mark, where, text in hooks if where == "before" and mark in ln)
        out.append(ln)
        out.extend(indent + text for mark, where, text in hooks if where == "after" and mark in ln)
    return "\n".join(out)


def spinning(source: str) -> str:
    """The source with every mbarrier wait a non-blocking test in a loop (``test_wait``) instead of the
    potentially suspending ``try_wait``: whether a waiting warp wakes late."""
    return source.replace("mbarrier.try_wait.parity", "mbarrier.test_wait.parity")


HINTED_LOAD = r"""static __device__ __forceinline__ void tr_tma_load_2d_hint(uint32_t dst, const TrTensorMap* map, int c0, int c1,
                                                           uint32_t bar) {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_%s.b64 %%0, %s;\n" : "=l"(pol));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%%0], [%%1, {%%2, %%3}], [%%4], %%5;\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "l"(pol) : "memory");
}
"""


def hinted(source: str, spec: str) -> str:
    """The source with the operands' TMA loads carrying an L2 eviction policy. ``spec``: the policy (``first``,
    ``last``), then ``:a`` or ``:b`` for one operand only, ``@F`` for a fraction of the lines (default 1)."""
    policy, _, frac = spec.partition("@")
    policy, _, which = policy.partition(":")
    at = source.index('extern "C" __global__')
    body = source[at:]
    for op in (which or "ab"):
        body = body.replace(f"tr_tma_load_2d(s{op}", f"tr_tma_load_2d_hint(s{op}")
    return source[:at] + HINTED_LOAD % (policy, frac or "1.0") + body


def relaunch(kernel, source: str, tag: str) -> None:
    """``kernel`` launching the binary of ``source`` (a variant of its own) from now on."""
    cubin = nv.compile_cached(source, kernel.artifact.name + tag, kernel.rendered.entry, "sm_90a")[0]
    kernel._launcher = Launcher(cubin.read_bytes(), kernel.rendered.entry, kernel.rendered.smem)


def variant_row(kern, source: str, tag: str, label: str, check) -> None:
    """``kern`` relaunched from ``source`` (a variant of its own), verified, then timed beside cuBLAS:
    one printed line. ``check``: (inputs, reference, its scale, the baseline, the op)."""
    inputs, ref, scale, base, op = check
    relaunch(kern, source, tag)
    err = float(np.abs(to_float64(kern(inputs), op.dtype) - ref).max()) / scale
    t = kern.time(inputs, warmup=5, repeats=30)
    v = time_torch(base.run, 5, 30)
    print(f"  {label}: err {err:.1e} {'ok' if err < 2e-2 else 'WRONG'}  {t.p50_ms * 1000:6.1f} µs "
          f"(p95 {t.p95_ms * 1000:6.1f})  cuBLAS {v.p50_ms * 1000:6.1f} µs  ratio {v.p50_ms / t.p50_ms:.3f}", flush=True)


def timeline(kernel, inputs: dict[str, np.ndarray], runs: int, spin: bool = False) -> list[np.ndarray]:
    """Stamps of ``runs`` launches of the stamped copy (each after a flush and a hold), one array each."""
    from cuda.bindings import driver as drv

    src = stamped(spinning(kernel.artifact.source) if spin else kernel.artifact.source)
    cubin = nv.compile_cached(src, kernel.artifact.name + ("_tls" if spin else "_tl"), kernel.rendered.entry,
                              "sm_90a")[0]
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
    g = t[:, :10].astype(float)
    base = g[:, 0][g[:, 0] > 0].min()
    rows = []
    for p, name in enumerate(POINTS):
        have = g[:, p] > 0
        if not have.any():
            continue
        at = (g[have, p] - base) / 1000.0
        rows.append(f"    {name:<14} n={int(have.sum()):>3}  at µs min {at.min():6.2f}  med {np.median(at):6.2f}  "
                    f"max {at.max():6.2f}")
    c = t[:, 10:20].astype(float)
    for a, b in ((0, 1), (1, 2), (2, 3), (3, 4), (2, 5), (0, 5), (2, 6), (6, 7), (7, 8), (7, 4), (8, 9), (4, 5)):
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


def forms_of(hero: WgmmaSchedule) -> list[tuple[str, WgmmaSchedule]]:
    """(label, schedule): the hero and the forms the timelines compare it with."""
    return [("hero", hero),
             ("s8 split4", WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma", split=4)),
             ("split2 (64 blocks)", WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=2)),
             ("split1 (32 blocks)", WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=1)),
             ("pair shares B", WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, store="tma", split=4)),
             ("cuBLAS's form", WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", cluster=2,
                                             cluster_axis="n", store="tma", split=4)),
             ("128x64 c2", WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", store="tma", split=4)),
             ("128x128 split8", WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", split=8)),
             ("128x64m c2", WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, store="tma", split=4)),
             ("128x64 c2 s6", WgmmaSchedule(bm=128, bn=64, stages=6, consumers=2, raster="n", store="tma", split=4)),
             ("hero s4", WgmmaSchedule(bm=64, bn=128, stages=4, consumers=1, store="tma", split=4)),
             ("hero s5", WgmmaSchedule(bm=64, bn=128, stages=5, consumers=1, store="tma", split=4)),
             ("128x64 c2 s4", WgmmaSchedule(bm=128, bn=64, stages=4, consumers=2, raster="n", store="tma", split=4)),
             ("128x64 c2 s5", WgmmaSchedule(bm=128, bn=64, stages=5, consumers=2, raster="n", store="tma", split=4)),
             ("spread hero", WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=4,
                                           split_fix="spread")),
             ("spread 128x64 c2", WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", store="tma", split=4,
                                                split_fix="spread"))]


def main() -> None:
    args = _args()
    if args.promotion:
        from tracea.emitters.cuda import tma

        tma.L2_PROMOTION = tma.OFF_LINE_PROMOTION = args.promotion
    m, n, k = (int(x) for x in args.shape.split("x"))
    op = Gemm(m, n, k, "bf16")
    host = probe()
    rng = np.random.default_rng(7)
    inputs = op.random_inputs(rng)
    ref = op.reference(inputs).astype(np.float64)
    base = torch_baseline(op, inputs)
    hero = gemm_hero_schedule(op)
    forms = forms_of(hero)
    if args.once:
        launch_once(args.once, forms, op, host, inputs, ref, base)
        return
    scale = float(np.abs(ref).max())
    check = (inputs, ref, scale, base, op)
    for label, sched in forms:
        if args.only and not any(label.startswith(w) for w in args.only.split(",")):
            continue
        kern = build(op, "cuda-wgmma.gemm", sched, host)
        if not timed_row(label, sched, kern, check):
            continue
        for policy in [p for p in args.hint.split(",") if p]:  # the same kernel with hinted operand loads
            tag = "_h" + "".join(c if c.isalnum() else "_" for c in policy)
            variant_row(kern, hinted(kern.artifact.source, policy), tag, f"L2 evict_{policy:<9} loads", check)
            relaunch(kern, kern.artifact.source, "_again")
        if args.spin:  # the same kernel with spinning waits, verified and timed the same way
            variant_row(kern, spinning(kern.artifact.source), "_spin", "spinning waits", check)
        if args.no_timeline:
            continue
        for spin in (False, True) if args.spin else (False,):
            name = f"{label.split()[0]}{'_spin' if spin else ''}_{sched.name}.npy"
            stamped_runs(kern, inputs, args.runs, spin, f"{args.out}/{name}")


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="512x512x16384")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=".", help="folder for the raw stamps (.npy)")
    ap.add_argument("--only", default="", help="forms whose labels start with one of these (comma-separated)")
    ap.add_argument("--no-timeline", action="store_true", help="verify and time only")
    ap.add_argument("--spin", action="store_true", help="also each form with spinning barrier waits")
    ap.add_argument("--hint", default="", help="also each form with L2 eviction hints on its loads (first,last)")
    ap.add_argument("--promotion", default="", help="the tensor maps' L2 promotion (NONE, L2_64B, L2_128B, L2_256B)")
    ap.add_argument("--once", default="", help="one form (its label's first word) and cuBLAS, 2 launches each (ncu)")
    return ap.parse_args()


def launch_once(once: str, forms: list[tuple[str, WgmmaSchedule]], op: Gemm, host, inputs, ref, base) -> None:
    """``--once``: one form (by label or its first word) verified, then it and cuBLAS launched twice each, for ncu."""
    sched = next(f for label, f in forms if label == once or label.split()[0] == once)
    kern = build(op, "cuda-wgmma.gemm", sched, host)
    err = float(np.abs(to_float64(kern(inputs), op.dtype) - ref).max()) / float(np.abs(ref).max())
    print(f"{once} {sched.name}: err {err:.1e}", flush=True)
    for _ in range(2):
        kern.launch()
        base.run()
    kern._dev.stream.sync()


def timed_row(label: str, sched: WgmmaSchedule, kern, check) -> bool:
    """One form verified, then timed as `bench` does beside cuBLAS: one printed line; whether it is right."""
    inputs, ref, scale, base, op = check
    out = to_float64(kern(inputs), op.dtype)
    err = float(np.abs(out - ref).max()) / scale
    ok = err < 2e-2
    tr = kern.time(inputs, warmup=5, repeats=30)
    vt = time_torch(base.run, 5, 30)
    print(f"{label:<20} {sched.name:<40} grid {kern._grid:>3}  err {err:.1e} {'ok' if ok else 'WRONG'}  "
          f"{tr.p50_ms * 1000:6.1f} µs (p95 {tr.p95_ms * 1000:6.1f})  cuBLAS {vt.p50_ms * 1000:6.1f} µs  "
          f"ratio {vt.p50_ms / tr.p50_ms:.3f}", flush=True)
    return ok


def stamped_runs(kern, inputs, runs: int, spin: bool, path: str) -> None:
    """The stamped copy run ``runs`` times: each run's entry-to-last-exit time, the median run's spread of
    stamps, and every run's stamps saved to ``path``."""
    stamps = timeline(kern, inputs, runs, spin)
    ends = [float(((r[:, 5][r[:, 5] > 0]).max() - r[:, 0][r[:, 0] > 0].min()) / 1000) for r in stamps]
    pick = stamps[int(np.argsort(ends)[len(ends) // 2])]
    print(f"  stamped copy{' (spinning waits)' if spin else ''}: entry-to-last-exit µs over {runs} runs "
          f"{[round(e, 1) for e in ends]} (median {statistics.median(ends):.1f}); the median run:")
    print(summarize(pick), flush=True)
    np.save(path, np.stack(stamps))


if __name__ == "__main__":
    main()
