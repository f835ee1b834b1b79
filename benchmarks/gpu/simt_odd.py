"""The fp32 SIMT GEMM (cuda-simt.gemm) on small and odd shapes against torch.matmul fp32 with TF32 off, in one
process on one GPU.

    python benchmarks/gpu/simt_odd.py                     # the hero of each shape: verified, timed, one table
    python benchmarks/gpu/simt_odd.py --sweep             # also tiles x split_k around it (what the hero picks from)
                                                          # and the core's other forms (simt.forms), then a table
                                                          # of each form's best ratio per shape (hero candidates)
    python benchmarks/gpu/simt_odd.py --shapes 1000x999x1001,37x1001x4097
    python benchmarks/gpu/simt_odd.py --compare           # the hero, the best form so far (the hero's tile in
                                                          # snake order) and the lane-filled cp.async forms
                                                          # (simt.FILL_FORMS, unsplit and split in 2) on
                                                          # 1000x999x1001, 1000^3, 777x1333x555 and 4096^3
    python benchmarks/gpu/simt_odd.py --compare --forms _cl,_cs   # only the forms whose names hold one of these

Each kernel is verified on fresh random inputs against a float64 product (torch on the GPU) before it is
timed, and (split over K) run once more to check that its output is bit-identical (the split is deterministic);
spilling candidates of the sweep are listed, not timed. The sweep's table at the end gives each form's best
ratio per shape: the row to copy into simt.HERO_CORE / HERO_BIG (and GEMV_MAX_M for the gemv form). Timing
is the project's (runtime.CudaKernel.time and baselines.time_torch): L2 flushed before every launch, the
stream held busy before the start event, CUDA events around each launch, median and p95. Needs an NVIDIA
GPU, PyTorch and cuda-core; from a checkout with nothing installed: `. benchmarks/gpu/shim.sh` first.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

SHAPES = "1000x999x1001,512x512x16384,4096x4096x4096,777x1333x555,64x4096x4096,37x1001x4097,1x513x8191,257x129x65"
VID = "cuda-simt.gemm"
TILES = ((128, 128, 16, 32, 64), (128, 128, 8, 32, 64), (64, 128, 16, 32, 64), (128, 64, 16, 64, 32),
         (64, 64, 16, 32, 64), (64, 64, 8, 32, 64), (32, 64, 8, 32, 64))
COMPARE_SHAPES = "1000x999x1001,1000x1000x1000,777x1333x555,4096x4096x4096"
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)
FORM_SPLITS = (1, 2, 4, 8, 16, 32)  # of the core's other forms (fewer: the sweep stays under 5 minutes)


class NoGpu:
    nvidia = None


def shapes(text: str) -> list:
    from tracea.kernels import Gemm

    out = []
    for item in text.split(","):
        m, n, k = (int(x) for x in item.lower().split("x"))
        out.append(Gemm(m, n, k, "fp32"))
    return out


def candidates(op, hero, sweep: bool, sms: int = 132) -> list:
    """The hero; with ``sweep`` also the tiles x splits above and the core's other forms (``simt.forms``:
    fragments double-buffered, 2 blocks an SM, 16-warp blocks, bk 32, short tiles for M <= 64), each unsplit
    and split where its tiles leave SMs idle; splits past 4 blocks an SM are left out."""
    from tracea.doctor.errors import TraceaError
    from tracea.emitters.cuda import simt
    from tracea.emitters.cuda.schedule import CudaSchedule

    out = [hero]
    if not sweep:
        return out
    grid = [CudaSchedule("simt", bm, bn, bk, wm, wn, 2, raster=8) for bm, bn, bk, wm, wn in TILES]
    for base in grid + simt.forms(op):
        tiles = simt._tiles(op, base)
        for split in SPLITS if base in grid else FORM_SPLITS:
            s = dataclasses.replace(base, split_k=split)
            if split > 1 and (tiles >= 2 * sms or tiles * split > 4 * sms):
                continue
            try:
                s.validate(op)
            except TraceaError:
                continue
            if s not in out and (s.bm * s.bn >= 128 * 64 or op.m * op.n < 4096 * 1024):
                out.append(s)
    return out


def compare_candidates(op, hero, sms: int = 132, only: tuple[str, ...] = ()) -> list:
    """The hero; the hero's tile and split in snake order (the best form on 1000x999x1001 so far, 0.889x on the
    H100 against the hero's 0.876x: docs/benchmarks.md); each of ``simt.fill_forms()`` and the first of them
    with no register cap (min_blocks 1: 140-165 registers), unsplit, and split in 2 where its tiles leave SMs
    idle. ``only``: of the others, those whose names hold one of these strings."""
    from tracea.doctor.errors import TraceaError
    from tracea.emitters.cuda import simt

    out = [hero]
    fills = simt.fill_forms()
    rest = [dataclasses.replace(hero, order="snake")]
    for f in fills + [dataclasses.replace(fills[0], min_blocks=1)]:  # and the first without its register cap
        rest += [f] + ([dataclasses.replace(f, split_k=2)] if simt._tiles(op, f) < sms else [])
    for s in rest:
        try:
            s.validate(op)
        except TraceaError:
            continue
        if s not in out and (not only or any(x in s.name for x in only)):
            out.append(s)
    return out


def pick(op, hero, args, sms: int) -> list:
    """The kernels to time on ``op``: ``compare_candidates`` with --compare, else ``candidates``."""
    if args.compare:
        return compare_candidates(op, hero, sms, tuple(x for x in args.forms.split(",") if x))
    return candidates(op, hero, args.sweep, sms)


def _compile(job) -> tuple[str, int]:
    """Compile one (op, schedule) for the GPU's target in a worker (NVRTC needs no device); build() then
    finds the cubin in the cache. (error, bytes spilled)."""
    from tracea.emitters.cuda.build import compile_kernel

    op, s, arch = job
    try:
        art = compile_kernel(op, VID, s, NoGpu(), arch)[3]
        return "", int(art.metadata["resources"]["spills"])
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return f"{type(exc).__name__}: {exc}", 0


def reference(op, torch) -> tuple[dict, np.ndarray]:
    """Fresh random inputs of ``op`` and their float64 product (torch on the GPU), once per shape."""
    inputs = op.random_inputs(np.random.default_rng(7))
    a, b = (torch.from_numpy(inputs[x]).cuda().double() for x in ("a", "b"))
    return inputs, (a @ b).cpu().numpy()


def measure(op, s, host, ref: tuple[dict, np.ndarray], repeats: int) -> dict:
    from tracea.emitters import cuda
    from tracea.kernels import relative_error, tolerance

    k = cuda.build(op, VID, s, host)
    inputs, want = ref
    out = np.full(op.output_shape(), np.nan, np.float32)
    k(inputs, out)
    err = relative_error(out.astype(np.float64), want)
    again = k(inputs) if s.split_k > 1 else out  # one block a tile: no arrival order to differ on
    t = k.time(inputs, warmup=3, repeats=repeats)
    res = k.artifact.metadata["resources"]
    return {"ok": err <= tolerance(op), "err": err, "same": bool(np.array_equal(out.view(np.uint32),
                                                                                 again.view(np.uint32))),
            "ms": t.p50_ms, "p95": t.p95_ms, "regs": res["regs_per_thread"], "spills": res["spills"],
            "grid": k.rendered.grid[0]}


def torch_ms(op, torch, repeats: int) -> tuple[float, float]:
    from tracea.emitters.device_baselines import time_torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(op.m, op.k, device="cuda")
    b = torch.randn(op.k, op.n, device="cuda")
    t = time_torch(lambda: torch.matmul(a, b), 3, repeats)
    return t.p50_ms, t.p95_ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="", help=f"MxNxK,... (default {SHAPES}; with --compare {COMPARE_SHAPES})")
    ap.add_argument("--sweep", action="store_true", help="time tiles x split_k beside the hero")
    ap.add_argument("--compare", action="store_true",
                    help="time the hero, the best form so far and the lane-filled forms (simt.FILL_FORMS)")
    ap.add_argument("--forms", default="", help="with --compare: only the forms whose names hold one of these")
    ap.add_argument("--repeats", type=int, default=0, help="timed launches a kernel (default 30; 20 with --sweep)")
    args = ap.parse_args()
    args.repeats = args.repeats or (20 if args.sweep else 30)
    args.shapes = args.shapes or (COMPARE_SHAPES if args.compare else SHAPES)
    from tracea.doctor import probe
    from tracea.emitters import cuda
    from tracea.emitters.cuda.arch import target_of

    host = probe()
    arch = target_of(host, None).name
    ops = shapes(args.shapes)
    sms = host.nvidia.devices[0].sm_count
    jobs = [(op, s, arch) for op in ops for s in pick(op, cuda.hero_schedule(op, VID, host), args, sms)]
    with ProcessPoolExecutor(max(1, min(16, os.cpu_count() or 1))) as pool:  # before any CUDA context
        errors = dict(zip(((id(j[0]), j[1]) for j in jobs), pool.map(_compile, jobs), strict=True))
    import torch

    print(f"device: {torch.cuda.get_device_name(0)}, {sms} SMs, target {arch}, {len(jobs)} kernels")
    print(f"{'shape':<20} {'schedule':<40} {'grid':>6} {'regs':>4} {'tracea ms':>10} {'torch ms':>9} "
          f"{'ratio':>6} {'p95/p50':>7} {'ok':>3} {'det':>3}")
    table: dict[str, dict[str, float]] = {}  # form (split left out) -> shape -> best ratio over its splits
    for op in ops:
        hero = cuda.hero_schedule(op, VID, host)
        base, base95 = torch_ms(op, torch, args.repeats)
        ref = reference(op, torch)
        rows, label = [], f"{op.m}x{op.n}x{op.k}"
        for s in pick(op, hero, args, sms):
            name = f"{s.name}{' (hero)' if s == hero else ''}"
            err, spills = errors[(id(op), s)]
            if err or (spills and s != hero):
                print(f"{f'{op.m}x{op.n}x{op.k}':<20} {name:<40} {err[:60] or f'spills {spills} B: not timed'}")
                continue
            r = measure(op, s, host, ref, args.repeats)
            if r["ok"]:
                rows.append((r["ms"], s))
                form = dataclasses.replace(s, split_k=1).name
                table.setdefault(form, {})[label] = max(base / r["ms"], table.get(form, {}).get(label, 0.0))
            print(f"{f'{op.m}x{op.n}x{op.k}':<20} {name:<40} {r['grid']:>6} {r['regs']:>4} {r['ms']:>10.4f} "
                  f"{base:>9.4f} {base / r['ms']:>6.3f} {r['p95'] / r['ms']:>7.2f} {'y' if r['ok'] else 'NO':>3} "
                  f"{'y' if r['same'] else 'NO':>3}", flush=True)
        if (args.sweep or args.compare) and rows:
            best = min(rows, key=lambda x: x[0])
            print(f"  best {best[1].name}: {base / best[0]:.3f}x torch (torch p95/p50 {base95 / base:.2f})")
    if args.sweep or args.compare:
        summary(table, [f"{op.m}x{op.n}x{op.k}" for op in ops])


def summary(table: dict[str, dict[str, float]], sigs: list[str]) -> None:
    """Each form's best ratio to torch per shape (over its splits), forms timed on every shape first, by their
    geometric mean: the hero candidates."""
    print("\nform (best split per shape): ratio to torch")
    print(f"{'form':<44}" + "".join(f"{s:>16}" for s in sigs) + f"{'geomean':>9}")

    def key(item):
        got = [item[1].get(s) for s in sigs]
        ok = [g for g in got if g]
        return (len(ok) < len(sigs), -float(np.exp(np.mean(np.log(ok)))) if ok else 0.0)

    for form, got in sorted(table.items(), key=key):
        ok = [got[s] for s in sigs if s in got]
        cells = "".join(f"{got[s]:>16.3f}" if s in got else f"{'-':>16}" for s in sigs)
        print(f"{form:<44}{cells}{float(np.exp(np.mean(np.log(ok)))):>9.3f}")


if __name__ == "__main__":
    main()
