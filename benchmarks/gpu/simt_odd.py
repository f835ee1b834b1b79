"""The fp32 SIMT GEMM (cuda-simt.gemm) on small and odd shapes against torch.matmul fp32 with TF32 off, in one
process on one GPU.

    python benchmarks/gpu/simt_odd.py                     # the hero of each shape: verified, timed, one table
    python benchmarks/gpu/simt_odd.py --sweep             # also tiles x split_k around it (what the hero picks from)
    python benchmarks/gpu/simt_odd.py --shapes 1000x999x1001,37x1001x4097

Each kernel is verified on fresh random inputs against a float64 product (torch on the GPU) before it is
timed, and run twice more to check that its output is bit-identical (the K split is deterministic). Timing
is the project's (runtime.CudaKernel.time and baselines.time_torch): L2 flushed before every launch, the
stream held busy before the start event, CUDA events around each launch, median and p95. Needs an NVIDIA
GPU, PyTorch and cuda-core; from a checkout with nothing installed: `. benchmarks/gpu/shim.sh` first.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np

SHAPES = "1000x999x1001,512x512x16384,4096x4096x4096,777x1333x555,64x4096x4096,37x1001x4097,1x513x8191,257x129x65"
VID = "cuda-simt.gemm"
TILES = ((128, 128, 16, 32, 64), (128, 128, 8, 32, 64), (64, 128, 16, 32, 64), (128, 64, 16, 64, 32),
         (64, 64, 16, 32, 64), (64, 64, 8, 32, 64), (32, 64, 8, 32, 64))
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)


class NoGpu:
    nvidia = None


def shapes(text: str) -> list:
    from tracea.kernels import Gemm

    out = []
    for item in text.split(","):
        m, n, k = (int(x) for x in item.lower().split("x"))
        out.append(Gemm(m, n, k, "fp32"))
    return out


def candidates(op, hero, sweep: bool) -> list:
    from tracea.doctor.errors import TraceaError
    from tracea.emitters.cuda.schedule import CudaSchedule

    out = [hero]
    if sweep:
        for bm, bn, bk, wm, wn in TILES:
            for split in SPLITS:
                s = CudaSchedule("simt", bm, bn, bk, wm, wn, 2, raster=8, split_k=split)
                try:
                    s.validate(op)
                except TraceaError:
                    continue
                if s not in out and (bm * bn >= 128 * 64 or op.m * op.n < 4096 * 1024):
                    out.append(s)
    return out


def _compile(job) -> str:
    """Compile one (op, schedule) for the GPU's target in a worker (NVRTC needs no device); build() then
    finds the cubin in the cache."""
    from tracea.emitters.cuda.build import compile_kernel

    op, s, arch = job
    try:
        compile_kernel(op, VID, s, NoGpu(), arch)
        return ""
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return f"{type(exc).__name__}: {exc}"


def measure(op, s, host, torch, repeats: int) -> dict:
    from tracea.emitters import cuda
    from tracea.kernels import relative_error, tolerance

    k = cuda.build(op, VID, s, host)
    inputs = op.random_inputs(np.random.default_rng(7))
    out = np.full(op.output_shape(), np.nan, np.float32)
    k(inputs, out)
    a, b = (torch.from_numpy(inputs[x]).cuda().double() for x in ("a", "b"))
    ref = (a @ b).cpu().numpy()
    err = relative_error(out.astype(np.float64), ref)
    again = k(inputs)
    t = k.time(inputs, warmup=3, repeats=repeats)
    res = k.artifact.metadata["resources"]
    return {"ok": err <= tolerance(op), "err": err, "same": bool(np.array_equal(out.view(np.uint32),
                                                                                 again.view(np.uint32))),
            "ms": t.p50_ms, "p95": t.p95_ms, "regs": res["regs_per_thread"], "spills": res["spills"],
            "grid": k.rendered.grid[0]}


def torch_ms(op, torch, repeats: int) -> tuple[float, float]:
    from tracea.emitters.cuda.baselines import time_torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(op.m, op.k, device="cuda")
    b = torch.randn(op.k, op.n, device="cuda")
    t = time_torch(lambda: torch.matmul(a, b), 3, repeats)
    return t.p50_ms, t.p95_ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--sweep", action="store_true", help="time tiles x split_k beside the hero")
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    from tracea.doctor import probe
    from tracea.emitters import cuda
    from tracea.emitters.cuda.arch import target_of

    host = probe()
    arch = target_of(host, None).name
    ops = shapes(args.shapes)
    jobs = [(op, s, arch) for op in ops for s in candidates(op, cuda.hero_schedule(op, VID, host), args.sweep)]
    with ProcessPoolExecutor(max(1, min(16, os.cpu_count() or 1))) as pool:  # before any CUDA context
        errors = dict(zip(((id(j[0]), j[1]) for j in jobs), pool.map(_compile, jobs), strict=True))
    import torch

    print(f"device: {torch.cuda.get_device_name(0)}, {host.nvidia.devices[0].sm_count} SMs, target {arch}")
    print(f"{'shape':<20} {'schedule':<40} {'grid':>6} {'regs':>4} {'tracea ms':>10} {'torch ms':>9} "
          f"{'ratio':>6} {'p95/p50':>7} {'ok':>3} {'det':>3}")
    for op in ops:
        hero = cuda.hero_schedule(op, VID, host)
        base, base95 = torch_ms(op, torch, args.repeats)
        rows = []
        for s in candidates(op, hero, args.sweep):
            name = f"{s.name}{' (hero)' if s == hero else ''}"
            if errors.get((id(op), s)):
                print(f"{op.m}x{op.n}x{op.k:<10} {name:<40} {errors[(id(op), s)][:60]}")
                continue
            r = measure(op, s, host, torch, args.repeats)
            rows.append((r["ms"], s))
            print(f"{f'{op.m}x{op.n}x{op.k}':<20} {name:<40} {r['grid']:>6} {r['regs']:>4} {r['ms']:>10.4f} "
                  f"{base:>9.4f} {base / r['ms']:>6.3f} {r['p95'] / r['ms']:>7.2f} {'y' if r['ok'] else 'NO':>3} "
                  f"{'y' if r['same'] else 'NO':>3}", flush=True)
        if args.sweep and rows:
            best = min(rows, key=lambda x: x[0])
            print(f"  best {best[1].name}: {base / best[0]:.3f}x torch (torch p95/p50 {base95 / base:.2f})")


if __name__ == "__main__":
    main()
