"""Probe: the CPU int8 kernel's forms and blocking (``emitters/cpu/scaled_gemm.py``'s schedules) on one shape, each
verified against the float64 reference, then timed with ``torch._int_mm`` and oneDNN's ``qlinear_pointwise`` in
alternating blocks (``timing.interleaved``: 5 samples a side a turn, 20 ms apart); per form the median of the
per-round ratios to the faster library, with its 95 % interval. What the hero rule rests on (the dot form below
``PACK_FROM_M`` rows, the packed one above; all of K in one chunk for the dot form).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_int8_forms.py 16x4096x14336 \
        4,6,4096,128 4,6,16384,128 p6,64,4096,96

A form is ``MR,NR,KC,MC`` (the dot form) or ``pMR,NR,KC,MC`` (packed); threads are all cores.
"""

from __future__ import annotations

import sys

import numpy as np

from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.emitters.cpu.scaled_gemm import ScaledGemmSchedule
from tracea.emitters.stability import paired_ratio
from tracea.emitters.timing import interleaved
from tracea.kernels import ScaledGemm, relative_error


def main(shape: str, forms: list[str]) -> None:
    import torch

    host = probe()
    m, n, k = (int(v) for v in shape.split("x"))
    op = ScaledGemm(m=m, n=n, k=k, scale="row")
    x = op.random_inputs(np.random.default_rng())
    ref = op.reference(x)
    a, w = torch.from_numpy(x["a"]), torch.from_numpy(x["b"])
    sa, sb = torch.from_numpy(x["scale_a"]), torch.from_numpy(x["scale_b"])
    au8 = (a.to(torch.int16) + 128).to(torch.uint8)
    packed = torch.ops.onednn.qlinear_prepack(w, None)
    zeros = torch.zeros(n, dtype=torch.int32)
    sides = {"torch._int_mm": lambda: torch._int_mm(a, w.t()).float().mul_(sa[:, None]).mul_(sb[None, :]),
             "oneDNN": lambda: torch.ops.onednn.qlinear_pointwise(au8, 1.0, 128, packed, sb, zeros, None, 1.0, 0,
                                                                   torch.float32, "none", [], "").mul_(sa[:, None])}
    cores = host.cpu.logical_cores or 1
    for spec in forms:
        pack = spec.startswith("p")
        mr, nr, kc, mc = (int(v) for v in spec.removeprefix("p").split(","))
        s = ScaledGemmSchedule(mr, nr, kc, mc, cores, pack)
        kernel = cpu.build(op, "cpu-avx512.scaled_gemm", s, host)
        out = np.empty((m, n), np.float32)
        sides[s.name] = lambda kernel=kernel, out=out: kernel(x, out)
    for name, fn in sides.items():
        err = relative_error(np.asarray(fn(), np.float64), ref)
        assert err <= 1e-5, f"{name}: relative error {err:.2e}"
    rounds: list[dict[str, float]] = []
    t = interleaved(sides, warmup=2, repeats=5 * 16, block=5, gap_s=0.02, rounds_out=rounds)
    best = min(("torch._int_mm", "oneDNN"), key=lambda name: t[name].p50_ms)
    print(f"{shape} on {host.cpu.vendor} {host.cpu.model}, {cores} threads; "
          + ", ".join(f"{name} {t[name].p50_ms:.3f} ms" for name in ("torch._int_mm", "oneDNN")))
    for name in list(sides)[2:]:
        got = paired_ratio(rounds, best, name)
        ratio = "too few rounds" if got is None else f"{got[0]:.2f} [{got[1]:.2f}, {got[2]:.2f}]"
        print(f"  {name:<28} {t[name].p50_ms:8.3f} / {t[name].p95_ms:8.3f} ms   {best}/it {ratio}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
