"""Tracea's CPU kernels against the library baselines, in one process: the ratio table of issue 3.

    python benchmarks/bench_cpu.py                 # fp32 GEMM 1024/2048/4096 + conv2d + softmax
    python benchmarks/bench_cpu.py --quick         # smaller sizes, for a smoke run
    OPENBLAS_CORETYPE=Haswell python benchmarks/bench_cpu.py --family cpu-avx2-fma
                                                   # the AVX2+FMA code path against OpenBLAS's AVX2
                                                   # kernels, on an AVX-512 machine (Zen 3's pair)

Each row: verified first on fresh random inputs against a float64 reference, then Tracea and the
baseline timed interleaved (warm-up, median, p95); ratio = baseline p50 / Tracea p50 (> 1: faster).
The target: fp32 GEMM >= 0.9x NumPy at 1024, 2048 and 4096.
"""

from __future__ import annotations

import argparse
import platform
import sys

from tracea.emitters.blas_env import quiet_openblas

quiet_openblas()  # before NumPy loads (see emitters/blas_env.py); the baseline's name records it

from tracea.doctor import probe  # noqa: E402
from tracea.emitters.bench import bench  # noqa: E402
from tracea.kernels import Conv2d, Gemm, Softmax  # noqa: E402
from tracea.reports.metrics import bench_row  # noqa: E402

GEMM_TARGET = 0.9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--csv", help="also write the metrics rows to this CSV file")
    ap.add_argument("--family", help="pin the CPU variant family (cpu-avx512, cpu-avx2-fma, ...); default: the planner's")
    args = ap.parse_args()
    host = probe()
    sizes = [256, 512] if args.quick else [1024, 2048, 4096]
    ops = [Gemm(s, s, s) for s in sizes]
    ops += [Gemm(1000, 1023, 4097 if not args.quick else 333), Gemm(sizes[-1], sizes[-1], sizes[-1], epilogue="bias,relu")]
    ops += [Gemm(sizes[0], sizes[0], sizes[0], dtype="bf16"), Gemm(sizes[0], sizes[0], sizes[0], dtype="fp16")]
    ops += [Conv2d(1, 64, 56 if not args.quick else 28, 56 if not args.quick else 28, 64, 3, 3, padding=1),
            Conv2d(8, 64, 28, 28, 128, 3, 3, padding=1, layout="nhwc"), Softmax(4096, 4096 if not args.quick else 512)]
    cpu = host.cpu
    print(f"machine: {cpu.model} · {cpu.logical_cores} logical cores · {cpu.simd_family} · "
          f"Python {platform.python_version()} · Tracea {host.tracea_version}")
    head = f"{'op':<44} {'variant':<22} {'tracea ms':>10} {'GFLOP/s':>9} {'baseline ms':>12} {'GFLOP/s':>9} {'ratio':>6}  baseline"
    print(head)
    rows, failed = [], False
    for op in ops:
        variant = f"{args.family}.{op.kind}" if args.family else None
        r = bench(op, host, repeats=args.repeat, min_seconds=1.0, variant=variant)
        rows.append(bench_row(r))
        label = op.signature.replace("layout_a=row,layout_b=row,", "").replace(",alpha=1.0", "").replace("epilogue=()", "")
        label = label[:44]
        if r.status != "ok":
            print(f"{label:<44} {r.variant or '-':<22} {r.status}: {r.error}")
            failed = True
            continue
        t, b = r.tracea, r.baseline
        base_ms = f"{b.p50_ms:>12.3f}" if b else f"{'-':>12}"
        base_gf = f"{op.flops / b.p50_ms / 1e6:>9.1f}" if b else f"{'-':>9}"
        ratio = f"{r.ratio:>6.2f}" if r.ratio is not None else f"{'-':>6}"
        print(f"{label:<44} {r.variant:<22} {t.p50_ms:>10.3f} {op.flops / t.p50_ms / 1e6:>9.1f} {base_ms} {base_gf} {ratio}  "
              f"{r.baseline_name or r.baseline_reason}")
        if isinstance(op, Gemm) and op.dtype.value == "fp32" and not op.epilogue and op.m in (1024, 2048, 4096):
            if r.ratio is None or r.ratio < GEMM_TARGET:
                failed = True
                print(f"  ^ below the {GEMM_TARGET}x target")
    if args.csv:
        from tracea.reports.metrics import to_csv

        with open(args.csv, "w") as f:
            f.write(to_csv(rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
