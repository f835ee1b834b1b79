"""Probe: on a noisy CPU, is the ratio stable where each side's timings are not? Tracea's CPU softmax (the hero)
and torch's, timed in rounds: each round a block of 5 samples of each side (alternating which goes first), each
block after 20 ms of sleep and one untimed call, as ``tracea bench`` times host pairs. Prints, for each of three
measurements, each side's median, p95/p50 and p50/min, the ratio of the two medians, and the median of the
per-round ratios with its order-statistics 95 % interval (stability.paired_ratio).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_paired_rounds.py 8192 512 [INNER]

INNER: calls inside one timed sample (default 1). Needs torch.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=int)
    ap.add_argument("cols", type=int)
    ap.add_argument("inner", type=int, nargs="?", default=1)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    import torch

    from tracea.doctor import probe
    from tracea.emitters.stability import paired_ratio
    from tracea.kernels import Softmax

    build = importlib.import_module("tracea.emitters.cpu.build")
    op, host, v = Softmax(args.rows, args.cols), probe(), "cpu-avx512.softmax"
    k = build.build(op, v, build.hero_schedule(op, v, host), host)
    x = op.random_inputs(np.random.default_rng(0))
    out = np.empty(op.output_shape(), np.float32)
    xt = torch.from_numpy(x["x"])
    sides = {"tracea": lambda: k(x, out), "torch": lambda: torch.softmax(xt, -1)}
    for f in sides.values():
        f()
        f()
    for _ in range(3):
        samples: dict[str, list[float]] = {n: [] for n in sides}
        rounds = []
        for r in range(args.rounds):
            blocks = {}
            for n in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                time.sleep(0.02)
                sides[n]()
                s = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(args.inner):
                        sides[n]()
                    s.append((time.perf_counter() - t0) * 1e3 / args.inner)
                blocks[n] = statistics.median(s)
                samples[n] += s
            rounds.append(blocks)
        parts = []
        for n, ms in samples.items():
            ms.sort()
            p50 = statistics.median(ms)
            p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
            parts.append(f"{n} p50 {p50:.3f} p95/p50 {p95 / p50:.2f} p50/min {p50 / ms[0]:.2f}")
        mid, lo, hi, n = paired_ratio(rounds, "torch", "tracea")
        ratio = statistics.median(samples["torch"]) / statistics.median(samples["tracea"])
        print(" | ".join(parts), f"| ratio of medians {ratio:.3f} | paired median {mid:.3f}, 95 % interval "
              f"{lo:.3f}-{hi:.3f} over {n} rounds", flush=True)


if __name__ == "__main__":
    main()
