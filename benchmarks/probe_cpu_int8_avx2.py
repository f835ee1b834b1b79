"""Probe: the CPU int8 GEMM's AVX2 family (16-bit multiply-adds, for CPUs without VNNI) through `tracea bench`'s own
measurement (verified, then timed beside the baseline), with Tracea's AVX2 fp32 GEMM on the same shape. On a VNNI
machine, run it with oneDNN held to AVX2 so that the baseline is what torch gives a CPU without VNNI:

    ONEDNN_MAX_CPU_ISA=AVX2 env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_int8_avx2.py
"""

from __future__ import annotations

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.kernels import Gemm, ScaledGemm


def main() -> None:
    host = probe()
    print("M x 4096 x 4096, int8 row scales into fp32: Tracea's cpu-avx2-fma kernels; times are medians")
    for m in (1, 16, 128):
        r = bench(ScaledGemm(m=m, n=4096, k=4096), host, backend="cpu", variant="cpu-avx2-fma.scaled_gemm")
        g = bench(Gemm(m=m, n=4096, k=4096), host, backend="cpu", variant="cpu-avx2-fma.gemm")
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else f"none ({r.note})"
        print(f"M={m}: int8 {r.tracea.p50_ms:.2f} ms; baseline {r.baseline.p50_ms:.2f} ms ({r.baseline_name}); "
              f"baseline/int8 {ratio}; Tracea fp32 GEMM {g.tracea.p50_ms:.2f} ms, int8 {g.tracea.p50_ms / r.tracea.p50_ms:.2f}x"
              " its speed", flush=True)


if __name__ == "__main__":
    main()
