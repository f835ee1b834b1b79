"""Probe: the CPU small-M GEMM path's K chunk (kc) and block width (nr) on decode-size GEMMs (row-major B, fp32),
and unroll (u), each form verified against float64, then timed in alternating blocks with NumPy's matmul
(``probe_cpu_gemm_blocks.time_forms``: OpenBLAS's workers told to sleep after 2^12 cycles, as ``tracea bench`` runs
it).
``default``: the path's defaults without a host rule (kc 32; 8 vectors a block for one row); ``hero``: this host's
hero (``gemm._small_m_on``). What the AMD rule rests on.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_small_m_chunks.py 1x4096x4096 16x4096x4096
"""

from __future__ import annotations

import dataclasses
import importlib
import sys

from probe_cpu_gemm_blocks import time_forms  # first: it quiets OpenBLAS's workers before NumPy loads

from tracea.doctor import probe
from tracea.kernels import Gemm


def main(shapes: list[str]) -> None:
    build = importlib.import_module("tracea.emitters.cpu.build")
    from tracea.emitters.cpu.gemv import small_m_schedule

    host, v = probe(), "cpu-avx512.gemm"
    print(f"CPU: {host.cpu.vendor} {host.cpu.model}", flush=True)
    for shp in shapes:
        m, n, k = (int(x) for x in shp.split("x"))
        op = Gemm(m=m, n=n, k=k)
        hero = build.hero_schedule(op, v, host)
        default = small_m_schedule(op, "cpu-avx512", hero.threads)
        forms = {"default": default, "hero": hero}
        for kc in (8, 16):
            for nr in ((32, 64, 128) if m == 1 else (16, 32, 48)):
                for u in (1, 4):
                    forms.setdefault(f"kc{kc} nr{nr} u{u}", dataclasses.replace(default, kc=kc, nr=nr, nc=nr, unroll=u))
        t = time_forms(build, op, v, host, forms)
        print(f"{shp}: default {str(default)[11:60]}...; hero kc {hero.kc} nr {hero.nr}", flush=True)
        print("   " + " | ".join(f"{name} {tm.p50_ms:.2f} ms" for name, tm in t.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["1x4096x4096", "1x14336x4096", "1x4096x14336", "16x4096x4096"])
