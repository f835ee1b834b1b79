"""Probe: the CPU's int8 GEMM in its AMX forms on a host with AMX-INT8, each verified, then timed in alternating
blocks (timing.interleaved): the swapped form (``scaled_gemm_amx_swapped_c.py``: the n x k weights read in place,
tdpbssd), the AMX form (tdpbsud tiles over the packed weights, 32 x 32, ``scaled_gemm_amx_c.py``), the VNNI packed
form (6 x 64) and, below 32 rows, the VNNI dot form (the hero there before). What ``scaled_gemm.SWAP_FROM_M`` and
``AMX_FROM_M`` rest on. Times in ms (median), then each form's time over the swapped form's.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_int8_amx.py [--threads N] [--blocks]

``--blocks``: the swapped form alone at 32 rows and more, its K chunk (4096, 8192, all of K) and block of A's rows
(128, 256, 512) against the hero's (kc 4096, mc 256).

``--against FILE``: the swapped form as this checkout renders it against the same schedule rendered from another
version of ``scaled_gemm_amx_swapped_c.py`` (FILE, e.g. ``git show HEAD~1:emitters/cpu/scaled_gemm_amx_swapped_c.py``),
both verified, then timed in alternating blocks in one process (a host whose speed drifts between runs moves both).
"""

from __future__ import annotations

import sys

from cpu_forms import timed_forms  # benchmarks/ (this script's folder)

from tracea.doctor import probe
from tracea.emitters.cpu.scaled_gemm import ScaledGemmSchedule as S
from tracea.kernels import ScaledGemm


def against(path: str, threads: int) -> None:
    """This checkout's swapped form against FILE's, on the shapes its changes were for."""
    import importlib.util

    import numpy as np

    from tracea.emitters.cpu import build
    from tracea.emitters.cpu import scaled_gemm_amx_swapped_c as here
    from tracea.emitters.stability import paired_ratio
    from tracea.emitters.timing import interleaved

    spec = importlib.util.spec_from_file_location("swapped_other", path)
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    ours = here.SWAPPED_C
    for m, n, k in [(2048, 2048, 2048), (128, 4096, 4096), (2048, 4096, 4096), (16, 4096, 4096)]:
        op = ScaledGemm(m, n, k)
        s = S(mr=32, nr=32, kc=4096, mc=256, threads=threads, pack=True, amx=True, swap=True)
        x = op.random_inputs(np.random.default_rng())
        ref = op.reference(x)
        fns = {}
        for name, src in (("this", ours), ("other", other.SWAPPED_C)):
            here.SWAPPED_C = src
            kernel = build(op, v, s, host)
            out = np.empty(op.output_shape(), np.float32)
            kernel(x, out)
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            assert err < 1e-5, f"{name} {op.signature}: relative error {err}"
            fns[name] = (lambda kernel=kernel, out=out, x=x: kernel(x, out))
        here.SWAPPED_C = ours
        rounds: list[dict[str, float]] = []
        t = interleaved(fns, repeats=45, min_seconds=0.5, block=3, gap_s=0.01, rounds_out=rounds)
        r = paired_ratio(rounds, "other", "this")
        ratio = "too few rounds" if r is None else f"{r[0]:.2f} [{r[1]:.2f}, {r[2]:.2f}]"
        print(f"{m}x{n}x{k}: this {t['this'].p50_ms:.3f} (p95 {t['this'].p95_ms:.3f}), other {t['other'].p50_ms:.3f} "
              f"(p95 {t['other'].p95_ms:.3f}); other / this, per round: {ratio}", flush=True)


host = probe()
v = "cpu-avx512.scaled_gemm"
threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else host.cpu.logical_cores or 1
print(host.cpu.model, host.cpu.vendor, "AMX-INT8" if "amx-int8" in host.cpu.isa else "no AMX-INT8", f"{threads} threads")
if "amx-int8" not in host.cpu.isa:
    raise SystemExit("this CPU has no AMX-INT8")
if "--against" in sys.argv:
    against(sys.argv[sys.argv.index("--against") + 1], threads)
    raise SystemExit(0)
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
