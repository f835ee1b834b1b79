"""Probe: the CPU blocked GEMM core's K block (kc), unroll and micro-kernel on this host, beside NumPy's matmul, for
the llm-gemm rows the blocked core runs (M = 128; fp32, row-major B). Each form is built, verified against float64
on fresh inputs, then all are timed in alternating blocks with NumPy (timing.interleaved; OpenBLAS's workers told
to sleep after 2^12 cycles, as ``tracea bench`` runs it); medians in ms. The hero is timed twice, first and last
of the forms: their gap is the method's spread.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_gemm_blocks.py [MxNxK ...]
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any

from tracea.emitters.blas_env import quiet_openblas

quiet_openblas()  # before NumPy loads: OpenBLAS's spinning workers would take a core from the form timed next

import numpy as np  # noqa: E402

from tracea.doctor import probe  # noqa: E402
from tracea.emitters.timing import interleaved  # noqa: E402
from tracea.kernels import Gemm  # noqa: E402

SHAPES = ["128x4096x4096", "128x11008x4096", "128x4096x11008", "128x14336x4096", "128x4096x14336"]


def time_forms(build: Any, op: Gemm, v: str, host: Any, forms: dict[str, Any]) -> dict[str, Any]:
    """Each of ``forms`` (name -> schedule) built and verified against float64 on fresh inputs (a form that cannot be
    built at this shape is left out), NumPy's matmul verified too, then all timed in alternating blocks: the
    timings by name."""
    x = op.random_inputs(np.random.default_rng(0))
    out = np.empty(op.output_shape(), np.float32)
    a, b = x["a"], x["b"]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    fns = {}
    for name, s in forms.items():
        try:
            kern = build.build(op, v, s, host)
        except Exception:  # noqa: BLE001 - a form this shape cannot take (a block too wide for the registers)
            continue
        kern(x, out)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        assert err < 1e-4, f"{op.case_label()} {name}: relative error {err}"
        fns[name] = (lambda kern=kern, x=x, out=out: kern(x, out))
    assert float(np.abs(np.matmul(a, b) - ref).max() / np.abs(ref).max()) < 1e-4, "NumPy's matmul is wrong here"
    fns["numpy"] = (lambda a=a, b=b: np.matmul(a, b))
    return interleaved(fns, repeats=9, min_seconds=1.5, block=3, gap_s=0.005)


def main(shapes: list[str]) -> None:
    build = importlib.import_module("tracea.emitters.cpu.build")
    host, v = probe(), "cpu-avx512.gemm"
    print(f"CPU: {host.cpu.vendor} {host.cpu.model}, {host.cpu.logical_cores} logical cores", flush=True)
    for shp in shapes:
        m, n, k = (int(x) for x in shp.split("x"))
        op = Gemm(m=m, n=n, k=k)
        hero = build.hero_schedule(op, v, host)
        forms = {"hero": hero}
        for kc in (256, 512, 1024):
            for u in (2, 8):
                forms.setdefault(f"8x48 kc{kc} u{u}", dataclasses.replace(hero, kc=kc, unroll=u))
        forms["6x64 mc132 kc256 u8"] = dataclasses.replace(hero, mr=6, nr=64, mc=132, kc=256, nc=4096, unroll=8)
        forms["hero again"] = hero  # the same kernel at another place in the order: the spread of the method
        t = time_forms(build, op, v, host, forms)
        print(f"{shp}: hero mr {hero.mr} nr {hero.nr} mc {hero.mc} kc {hero.kc} nc {hero.nc} unroll {hero.unroll}",
              flush=True)
        print("   " + " | ".join(f"{name} {tm.p50_ms:.1f}" for name, tm in t.items()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or SHAPES)
