"""Probe: the CPU's int8 GEMM in its AMX form (tdpbsud tiles, 32 x 32, ``scaled_gemm_amx_c.py``) against the VNNI
packed form (6 x 64, the hero before it) on a host with AMX-INT8, each verified, then timed in alternating blocks
(timing.interleaved). What ``scaled_gemm.AMX_FROM_M`` rests on.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_int8_amx.py
"""

from __future__ import annotations

from cpu_forms import timed_forms  # benchmarks/ (this script's folder)

from tracea.doctor import probe
from tracea.emitters.cpu.scaled_gemm import ScaledGemmSchedule as S
from tracea.kernels import ScaledGemm

host = probe()
v = "cpu-avx512.scaled_gemm"
threads = host.cpu.logical_cores or 1
print(host.cpu.model, host.cpu.vendor, "AMX-INT8" if "amx-int8" in host.cpu.isa else "no AMX-INT8", f"{threads} threads")
if "amx-int8" not in host.cpu.isa:
    raise SystemExit("this CPU has no AMX-INT8")
for m, n, k in [(2048, 2048, 2048), (128, 4096, 4096), (128, 4096, 14336), (64, 4096, 4096), (32, 4096, 4096),
                (16, 4096, 4096)]:
    op = ScaledGemm(m, n, k)
    kc = 2048 if 128 < m <= 256 else 4096
    forms = {"amx": S(mr=32, nr=32, kc=4096, mc=96, threads=threads, pack=True, amx=True),
             "vnni": S(mr=6, nr=64, kc=kc, mc=96, threads=threads, pack=True)}
    t = timed_forms(op, v, forms, host, 1e-5, repeats=12, min_seconds=0.3, block=3, gap_s=0.01)
    print(f"{m}x{n}x{k}: AMX {t['amx'].p50_ms:.3f} ms, VNNI packed {t['vnni'].p50_ms:.3f} ms "
          f"({t['vnni'].p50_ms / t['amx'].p50_ms:.2f}x)", flush=True)
