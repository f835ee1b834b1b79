"""Probe: the CPU's int8 GEMM in its AMX forms on a host with AMX-INT8, each verified, then timed in alternating
blocks (timing.interleaved): the swapped form (``scaled_gemm_amx_swapped_c.py``: the n x k weights read in place,
tdpbssd), the AMX form (tdpbsud tiles over the packed weights, 32 x 32, ``scaled_gemm_amx_c.py``), the VNNI packed
form (6 x 64) and, below 32 rows, the VNNI dot form (the hero there before). What ``scaled_gemm.SWAP_FROM_M`` and
``AMX_FROM_M`` rest on. Times in ms (median), then each form's time over the swapped form's.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_int8_amx.py [--threads N] [--blocks]

``--blocks``: the swapped form alone at 32 rows and more, its K chunk (4096, 8192, all of K) and block of A's rows
(128, 256, 512) against the hero's (kc 4096, mc 256).
"""

from __future__ import annotations

import sys

from cpu_forms import timed_forms  # benchmarks/ (this script's folder)

from tracea.doctor import probe
from tracea.emitters.cpu.scaled_gemm import ScaledGemmSchedule as S
from tracea.kernels import ScaledGemm

host = probe()
v = "cpu-avx512.scaled_gemm"
threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else host.cpu.logical_cores or 1
print(host.cpu.model, host.cpu.vendor, "AMX-INT8" if "amx-int8" in host.cpu.isa else "no AMX-INT8", f"{threads} threads")
if "amx-int8" not in host.cpu.isa:
    raise SystemExit("this CPU has no AMX-INT8")
if "--blocks" in sys.argv:
    for m, n, k in [(128, 4096, 11008), (128, 11008, 4096), (128, 4096, 4096), (2048, 2048, 2048), (2048, 4096, 4096)]:
        op = ScaledGemm(m, n, k)
        full = -(-k // 128) * 128
        forms = {f"kc{kc}_mc{mc}": S(mr=32, nr=32, kc=kc, mc=mc, threads=threads, pack=True, amx=True, swap=True)
                 for kc in sorted({4096, 8192, full}) for mc in ((128, 256, 512) if m > 256 else (256,))}
        t = timed_forms(op, v, forms, host, 1e-5, repeats=12, min_seconds=0.3, block=3, gap_s=0.01)
        print(f"{m}x{n}x{k}: " + ", ".join(f"{f} {t[f].p50_ms:.3f} ({t[f].p50_ms / t['kc4096_mc256'].p50_ms:.2f})"
                                           for f in forms if "kc4096_mc256" in t), flush=True)
    raise SystemExit(0)
for m, n, k in [(2048, 2048, 2048), (2048, 4096, 4096), (128, 4096, 4096), (128, 11008, 4096), (128, 4096, 11008),
                (32, 4096, 4096), (16, 4096, 4096), (8, 4096, 4096), (4, 4096, 4096), (1, 4096, 4096)]:
    op = ScaledGemm(m, n, k)
    kc = 2048 if 128 < m <= 256 else 4096
    forms = {"swapped": S(mr=32, nr=32, kc=4096, mc=256, threads=threads, pack=True, amx=True, swap=True),
             "amx": S(mr=32, nr=32, kc=4096, mc=96, threads=threads, pack=True, amx=True),
             "vnni packed": S(mr=6, nr=64, kc=kc, mc=96, threads=threads, pack=True)}
    if m < 32:
        mr, nr = (m, 8) if m <= 2 else (4, 6)
        forms["vnni dot"] = S(mr=mr, nr=nr, kc=-(-k // 128) * 128, mc=max(mr, 128 // mr * mr), threads=threads)
    t = timed_forms(op, v, forms, host, 1e-5, repeats=12, min_seconds=0.3, block=3, gap_s=0.01)
    print(f"{m}x{n}x{k}: " + ", ".join(f"{f} {t[f].p50_ms:.3f} ({t[f].p50_ms / t['swapped'].p50_ms:.2f})" for f in forms),
          flush=True)
