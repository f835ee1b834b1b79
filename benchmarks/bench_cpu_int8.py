"""The CPU's int8 GEMM (issue 35) against the int8 GEMMs torch offers on this CPU, and against Tracea's own fp32 GEMM.

Each row: the op verified first (Tracea's kernel and every baseline against the float64 reference on fresh random
inputs), then timed in alternating blocks (``timing.interleaved``: 5 samples a side a turn, 20 ms apart) over
``--rounds`` rounds; median and p95 of each side, and the median of the per-round ratios with its 95 % interval
(``stability.paired_ratio``). A ratio whose interval is wider than 1.10x is printed as unstable, without a figure.

Contenders: Tracea through ``tracea.ops.scaled_gemm`` (what users call: argument checks and routing included) and
its kernel alone; ``torch._int_mm`` with the scales applied after; oneDNN's ``qlinear_pointwise`` (the weights
prepacked once outside the timing, A as unsigned bytes with zero point 128, prepared once); the best of the two is
the baseline. The ``fp32`` row times Tracea's own fp32 GEMM on the same shape (the issue's ">= 2x" bar).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_cpu_int8.py [--rounds 20] [--threads N] [SHAPE ...]

``--threads N``: Tracea's kernel on N threads and torch's too (``torch.set_num_threads``); the ``tracea.ops`` side,
which takes the hero's own count, is left out then.

SHAPE is MxNxK (default: 2048x2048x2048 and the llm-gemm projections at M = 1, 16, 128).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from tracea.doctor import probe
from tracea.emitters.stability import paired_ratio
from tracea.emitters.timing import interleaved
from tracea.kernels import Gemm, ScaledGemm, relative_error
from tracea.kernels.ops.gemm import PROJECTIONS

LIMIT = 1.10  # widest 95 % interval (high / low) a printed ratio may have


def _torch_sides(op, x):
    import torch

    a, w = torch.from_numpy(x["a"]), torch.from_numpy(x["b"])
    sa, sb = torch.from_numpy(x["scale_a"]), torch.from_numpy(x["scale_b"])
    au8 = (a.to(torch.int16) + 128).to(torch.uint8)
    packed = torch.ops.onednn.qlinear_prepack(w, None)
    zeros = torch.zeros(op.n, dtype=torch.int32)
    return {
        "torch._int_mm": lambda: torch._int_mm(a, w.t()).float().mul_(sa[:, None]).mul_(sb[None, :]),
        "oneDNN": lambda: torch.ops.onednn.qlinear_pointwise(au8, 1.0, 128, packed, sb, zeros, None, 1.0, 0,
                                                              torch.float32, "none", [], "").mul_(sa[:, None]),
    }


def _ratio(rounds, num, den):
    got = paired_ratio(rounds, num, den)
    if got is None:
        return "too few rounds"
    med, lo, hi, _ = got
    return f"{med:.2f} [{lo:.2f}, {hi:.2f}]" if hi / lo <= LIMIT else f"unstable [{lo:.2f}, {hi:.2f}]"


def row(shape: str, rounds: int, host, threads: int = 0) -> None:
    import tracea
    from tracea.emitters import cpu

    m, n, k = (int(v) for v in shape.split("x"))
    op = ScaledGemm(m=m, n=n, k=k, scale="row")
    x = op.random_inputs(np.random.default_rng())
    ref = op.reference(x)
    variant = tracea.ops.explain(tracea.ops.scaled_gemm, x["a"], x["b"].T, x["scale_a"], x["scale_b"]).variant
    hero = cpu.hero_schedule(op, variant, host)
    hero = dataclasses.replace(hero, threads=threads) if threads else hero
    kernel = cpu.build(op, variant, hero, host)
    out = np.empty((m, n), np.float32)
    sides = {"tracea.ops": lambda: tracea.ops.scaled_gemm(x["a"], x["b"].T, x["scale_a"], x["scale_b"]),
             "kernel": lambda: kernel(x, out), **_torch_sides(op, x)}
    if threads:
        del sides["tracea.ops"]
    for name, fn in sides.items():
        err = relative_error(np.asarray(fn(), np.float64), ref)
        assert err <= 1e-5, f"{name} {shape}: relative error {err:.2e}"
    if m == n == k:  # the bar: at least 2x Tracea's own fp32 GEMM at 2048^3
        g = Gemm(m=m, n=n, k=k)
        gx = g.random_inputs(np.random.default_rng())
        fp32 = cpu.build(g, "cpu-avx512.gemm", cpu.hero_schedule(g, "cpu-avx512.gemm", host), host)
        assert relative_error(fp32(gx), g.reference(gx)) <= 1e-4
        sides["fp32 GEMM"] = lambda: fp32(gx)
    per_round: list[dict[str, float]] = []
    t = interleaved(sides, warmup=2, repeats=5 * rounds, block=5, gap_s=0.02, rounds_out=per_round)
    best = min(("torch._int_mm", "oneDNN"), key=lambda s: t[s].p50_ms)
    cells = "  ".join(f"{s} {t[s].p50_ms:.3f}/{t[s].p95_ms:.3f}" for s in sides)
    line = f"{shape:<16} {hero.name:<24} {cells}  | " + ("" if threads else
                                                             f"{best}/ops {_ratio(per_round, best, 'tracea.ops')}  ")
    line += f"{best}/kernel {_ratio(per_round, best, 'kernel')}"
    if "fp32 GEMM" in sides:
        line += f"  fp32/kernel {_ratio(per_round, 'fp32 GEMM', 'kernel')}"
    print(line, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("shapes", nargs="*")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="Tracea's kernel and torch on this many threads")
    args = p.parse_args()
    shapes = args.shapes or ["2048x2048x2048"] + [f"{m}x{n}x{k}" for m in (1, 16, 128) for n, k in PROJECTIONS]
    host = probe()
    import torch
    from threadpoolctl import threadpool_info

    if args.threads:
        torch.set_num_threads(args.threads)

    print(f"CPU: {host.cpu.vendor} {host.cpu.model}, {host.cpu.logical_cores} threads, isa {' '.join(host.cpu.isa)}")
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads); BLAS "
          f"{[(i.get('internal_api'), i.get('architecture'), i.get('num_threads')) for i in threadpool_info()]}")
    print("times: median/p95 ms; ratios: median of per-round ratios [95 % interval], > 1: Tracea faster",
          flush=True)
    for shape in shapes:
        row(shape, args.rounds, host, args.threads)


if __name__ == "__main__":
    sys.exit(main())
