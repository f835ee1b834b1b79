"""Host time of a repeated ``tracea.ops`` call beside the framework's own op of the same kind, in one run.

NumPy (any machine): ``tracea.ops.gemm`` on float32 64x64x64 arrays against ``numpy.matmul``. CUDA tensors
(with ``--cuda``, a GPU and PyTorch): gemm, conv2d (channels_last), softmax and attention against
``a @ b``, ``F.conv2d``, ``torch.softmax`` and ``F.scaled_dot_product_attention`` (and on an sm_90 GPU, scaled_gemm
in FP8 against ``torch._scaled_mm``), on shapes whose kernels
run for less time than a call's host time, so that the wall time of queued calls is the host's.

Each output is first checked against the framework's on fresh random inputs. Then blocks of ``--calls``
calls alternate between the two sides (each block after a warm-up, the GPU drained between blocks and not
timed); the table gives the median and p95 of the per-call times of ``--blocks`` blocks and their ratio,
which is not printed when either side's p95 is more than 1.5x its median (an unstable measurement). The
prepared-call counts (``tracea.ops.stats()``) show the kernel path ran, not a fallback.

    python benchmarks/bench_ops_host.py [--cuda] [--calls 100] [--blocks 21] [--profile]

``--profile``: after the table, cProfile over 2000 calls of each ``tracea.ops`` case, the functions by own time
(where the host time of a prepared call goes).

The CPU figure names the CPU and its BLAS's kernel set (threadpoolctl); run it with OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset where a machine pins them, so that NumPy runs OpenBLAS's own choice
(``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_ops_host.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tracea.emitters.blas_env import quiet_openblas

quiet_openblas()  # before NumPy loads: OpenBLAS's spinning workers would take a core from the next block

import numpy as np  # noqa: E402

import tracea  # noqa: E402

ops = tracea.ops
UNSTABLE = 1.5


def per_call_us(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> float:
    sync()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t
    sync()
    return elapsed / calls * 1e6


def measure(sides: dict[str, Callable[[], Any]], calls: int, blocks: int,
            sync: Callable[[], None]) -> dict[str, list[float]]:
    for fn in sides.values():  # warm-up: builds, prepares, the framework's own caches
        per_call_us(fn, calls, sync)
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(blocks):
        for name, fn in sides.items():
            times[name].append(per_call_us(fn, calls, sync))
    return times


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]


def row(label: str, times: dict[str, list[float]], vendor: str, path: str) -> str:
    t, v = times["tracea"], times[vendor]
    tm, vm = statistics.median(t), statistics.median(v)
    stable = p95(t) <= UNSTABLE * tm and p95(v) <= UNSTABLE * vm
    ratio = f"{tm / vm:.2f}x" if stable else "unstable (p95 > 1.5x median): no ratio"
    return (f"| {label} | {tm:.1f} / {p95(t):.1f} | {vendor}: {vm:.1f} / {p95(v):.1f} | {ratio} | {path} |")


def path_of(before: dict[str, int]) -> str:
    after = ops.stats()
    fast = after.get("fast_path", 0) - before.get("fast_path", 0)
    slow = after.get("slow_path", 0) - before.get("slow_path", 0)
    route = ops.explain()
    where = route.variant if route.path == "tracea" else f"FALLBACK ({route.reason})"
    from tracea.ops import _prepared

    newest = list(_prepared.PREPARED.values())[-1] if _prepared.PREPARED else None  # this case's signature
    how = "" if newest is None or newest.stream is None else \
        ", in C" if newest.fast is not None else ", in Python"
    return f"{where}; {fast} prepared calls{how}, {slow} slow"


def numpy_rows(calls: int, blocks: int) -> list[str]:
    from tracea.emitters.baselines import blas_name

    rng = np.random.default_rng()
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for name, got in (("tracea.ops.gemm", ops.gemm(a, b)), ("numpy.matmul", np.matmul(a, b))):
        err = float(np.abs(got - want).max() / np.abs(want).max())
        if not err < 1e-5:
            sys.exit(f"{name} is wrong on 64^3 fp32: relative error {err:.2g}")
    before = ops.stats()
    times = measure({"tracea": lambda: ops.gemm(a, b), "numpy.matmul": lambda: np.matmul(a, b)}, calls, blocks,
                    lambda: None)
    print(f"NumPy side: {blas_name()}")
    return [row("gemm fp32 64x64x64, NumPy arrays", times, "numpy.matmul", path_of(before))]


def cuda_rows(calls: int, blocks: int) -> list[str]:
    import torch
    import torch.nn.functional as F

    dev = "cuda"
    sync = torch.cuda.synchronize
    rows = []
    h = torch.float16
    a, b = torch.randn(64, 64, device=dev, dtype=h), torch.randn(64, 64, device=dev, dtype=h)
    x = torch.randn(1, 64, 14, 14, device=dev, dtype=h).contiguous(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device=dev, dtype=h).contiguous(memory_format=torch.channels_last)
    s = torch.randn(64, 1024, device=dev, dtype=h)
    bf = torch.bfloat16
    q = torch.randn(1, 8, 128, 64, device=dev, dtype=bf)
    kv = torch.randn(1, 8, 128, 64, device=dev, dtype=bf)
    cases = [
        ("gemm fp16 64x64x64", lambda: ops.gemm(a, b), "a @ b", lambda: a @ b),
        ("conv2d fp16 1x64x14x14, 64 3x3 filters, pad 1, channels_last",
         lambda: ops.conv2d(x, w, padding=1), "F.conv2d", lambda: F.conv2d(x, w, padding=1)),
        ("softmax fp16 64x1024", lambda: ops.softmax(s), "torch.softmax", lambda: torch.softmax(s, -1)),
        ("attention bf16 b1 h8 s128 d64 causal", lambda: ops.attention(q, kv, kv, causal=True),
         "F.scaled_dot_product_attention", lambda: F.scaled_dot_product_attention(q, kv, kv, is_causal=True)),
    ]
    if torch.cuda.get_device_capability() == (9, 0):  # the FP8 kernel (cuda-wgmma.scaled_gemm) runs on sm_90
        f8 = torch.float8_e4m3fn
        a8, w8 = torch.randn(64, 64, device=dev).to(f8), torch.randn(64, 64, device=dev).to(f8)
        sa, sw = torch.rand(64, 1, device=dev) + 0.5, torch.rand(1, 64, device=dev) + 0.5
        cases.append(("scaled_gemm fp8e4m3 64x64x64, row scales -> bf16",
                      lambda: ops.scaled_gemm(a8, w8.T, sa, sw, out_dtype="bf16"), "torch._scaled_mm",
                      lambda: torch._scaled_mm(a8, w8.T, scale_a=sa, scale_b=sw, out_dtype=bf)))
        # an FP8 C with its amax (per-tensor scales); torch 2.10-2.11's _scaled_mm drops scale_result into FP8
        # (pytorch#190449), so its call folds scale_out into scale_a, as the bench baseline does
        st, so, amax = (torch.tensor([v], device=dev) for v in (0.75, 0.5, 0.0))  # float32 (1,) each
        sa_so, sb = (st * so).reshape(()), st.reshape(())  # made once, as a user of _scaled_mm would
        cases.append(("scaled_gemm fp8e4m3 64x64x64, tensor scales -> fp8e4m3 + amax",
                      lambda: ops.scaled_gemm(a8, w8.T, st, st, out_dtype=f8, scale_out=so, amax=amax),
                      "torch._scaled_mm",
                      lambda: torch._scaled_mm(a8, w8.T, scale_a=sa_so, scale_b=sb, out_dtype=f8)))
    PROFILED.extend((label, mine) for label, mine, _, _ in cases)
    with torch.inference_mode():
        for label, mine, vendor, theirs in cases:
            got, want = mine().float(), theirs().float()
            err = float((got - want).abs().max() / want.abs().max())
            if not err < (2 ** -3 if got.numel() and "-> fp8" in label else 2e-2):  # an FP8 C: one code apart
                sys.exit(f"{label}: tracea.ops differs from {vendor}: relative error {err:.2g}")
            before = ops.stats()
            times = measure({"tracea": mine, vendor: theirs}, calls, blocks, sync)
            rows.append(row(label + ", CUDA tensors", times, vendor, path_of(before)))
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    return rows


PROFILED: list[tuple[str, Callable[[], Any]]] = []


def profile(calls: int = 2000) -> None:
    import cProfile
    import io
    import pstats

    for label, fn in PROFILED:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
        print(f"\n--- {label}: {calls} calls under cProfile")
        print("\n".join(line for line in text.getvalue().splitlines() if line.strip())[-1800:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda", action="store_true", help="also CUDA tensors (a GPU and PyTorch)")
    ap.add_argument("--calls", type=int, default=100, help="calls a block (default 100)")
    ap.add_argument("--blocks", type=int, default=21, help="timed blocks a side (default 21)")
    ap.add_argument("--profile", action="store_true", help="cProfile each tracea.ops case after the table")
    args = ap.parse_args(argv)
    from tracea.doctor import probe

    print(f"CPU: {probe().cpu.model}")
    rows = numpy_rows(args.calls, args.blocks)
    if args.cuda:
        rows += cuda_rows(args.calls, args.blocks)
    print(f"\nhost time per call, µs (median / p95 of {args.blocks} blocks of {args.calls} calls)\n")
    print("| call | tracea.ops | framework's op | ratio | path |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    if args.profile and PROFILED:
        import torch

        with torch.inference_mode():
            profile()
    return 0


if __name__ == "__main__":
    sys.exit(main())
