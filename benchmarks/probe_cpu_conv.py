"""Probe: Tracea's CPU conv2d (heuristic schedule) against torch's on the ResNet-50 suite rows (NHWC fp32,
batch 1), each verified against the float64 reference, timed three ways to see which is honest on a small
machine: ``inter`` (strict interleaving, one sample each in turn), ``blocks`` (``--block`` samples of one
side, then of the other, ``--rounds`` times, each turn after ``--gap`` seconds of sleep and one untimed
call: what ``tracea bench`` does) and ``sep`` (all of one side, then all of the other). Prints the form
and micro-kernel of Tracea's schedule, p50, p95/p50 and the fastest sample per side, and the ratio
torch/Tracea of the medians and of the fastest samples (on a shared machine the medians say more about
the neighbours).

    python benchmarks/probe_cpu_conv.py --mode blocks --gap 0.02            # every row
    python benchmarks/probe_cpu_conv.py --mode inter --rows 1,7,13          # some rows
    python benchmarks/probe_cpu_conv.py --packed --threads 2 --no-torch     # the packed path alone
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

import numpy as np


def timings(fn, n, inner):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) * 1e3 / inner)
    return out


def stats(ms):
    ms = sorted(ms)
    p50 = statistics.median(ms)
    return p50, ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))] / p50, ms[0]


def main() -> None:
    a = _args()
    from tracea.doctor import probe
    from tracea.emitters import registry
    from tracea.emitters.baselines import baseline_for
    from tracea.kernels import relative_error
    from tracea.kernels.ops.conv2d import resnet50_convs

    host = probe()
    if a.threads and not a.no_torch:
        import torch

        torch.set_num_threads(a.threads)
    b = registry.backend("cpu")
    ops = resnet50_convs("fp32", batches=(1,), layout=a.layout)
    sel = range(len(ops)) if a.rows == "all" else [int(x) for x in a.rows.split(",")]
    rng = np.random.default_rng(0)
    for i in sel:
        op = ops[i]
        v = registry.variant("cpu-avx512.conv2d")
        s = b.hero_schedule(op, v, host)
        if a.threads:
            s = dataclasses.replace(s, threads=a.threads)
        if a.packed:
            s = dataclasses.replace(s, pack_a=True)
        k = b.build(op, v, s, host)
        inputs = op.random_inputs(rng)
        out = np.empty(op.output_shape(), np.float32)
        k(inputs, out)
        err = relative_error(out.astype(np.float64), op.reference(inputs))
        fns = {"tracea": lambda k=k, inputs=inputs, out=out: k(inputs, out)}
        if not a.no_torch:
            fns["torch"] = baseline_for(op, inputs).run
        print(row_line(i, op, s, err, sample(fns, a)), flush=True)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="all")
    ap.add_argument("--mode", default="blocks", choices=["inter", "blocks", "sep"])
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--layout", default="nhwc")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="both sides' threads (0: Tracea's hero, torch's own)")
    ap.add_argument("--packed", action="store_true", help="Tracea's packed path (pack_a on)")
    ap.add_argument("--gap", type=float, default=0.0, help="seconds of sleep before each block")
    return ap.parse_args()


def sample(fns, a) -> dict:
    """Each side's samples (ms a call), timed the way ``--mode`` says, after three warm-up calls; each sample
    repeats a side's call enough times to last about 2 ms."""
    for f in fns.values():
        for _ in range(3):
            f()
    inner = {}
    for name, f in fns.items():
        t0 = time.perf_counter()
        f()
        once = time.perf_counter() - t0
        inner[name] = max(1, min(1000, int(0.002 / once) + 1))
    res = {n: [] for n in fns}
    if a.mode == "inter":
        for _ in range(a.block * a.rounds):
            for n, f in fns.items():
                res[n] += timings(f, 1, inner[n])
    elif a.mode == "blocks":
        for r in range(a.rounds):
            items = list(fns.items()) if r % 2 == 0 else list(reversed(fns.items()))
            for n, f in items:
                if a.gap:
                    time.sleep(a.gap)
                f()  # one untimed call: the side's pool wakes
                res[n] += timings(f, a.block, inner[n])
    else:
        for n, f in fns.items():
            res[n] = timings(f, a.block * a.rounds, inner[n])
    return res


def row_line(i, op, s, err, res) -> str:
    """One row: the conv, Tracea's form and micro-kernel, its error, and each side's p50, p95/p50 and fastest
    sample, with the ratios torch/Tracea."""
    t50, tsp, tmin = stats(res["tracea"])
    form = "small-M" if not s.pack_b else "direct" if not s.pack_a else "packed"
    line = (f"{i:2d} {str((op.c, op.h, op.k, op.r, op.stride[0])):24s} {form:7s} {s.mr}x{s.nr} err={err:.1e} "
            f"tracea {t50:8.3f} ms x{tsp:.2f} min {tmin:.3f}")
    if "torch" in res:
        b50, bsp, bmin = stats(res["torch"])
        line += f"  torch {b50:8.3f} ms x{bsp:.2f} min {bmin:.3f}  ratio {b50 / t50:.2f} (of mins {bmin / tmin:.2f})"
    return line


if __name__ == "__main__":
    sys.exit(main())
