"""Throughput of the bank-conflict simulator: warp-instructions scored per second (median of repeats),
checked against the issue's target of 1,000,000 per second.

Workloads (1,048,576 instructions each, built once, outside the timing):
  random      every op and width at random, 10 % inactive lanes, addresses in 4 KiB
  tile sweeps ldmatrix/stmatrix/ld/st/cp.async sweeps of real tile layouts, repeated to size

    python benchmarks/bench_bank_sim.py [--repeat 5] [--n 1048576]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

from tracea.emitters.bank_access import INACTIVE, OPS, AccessBatch, tile_sweep
from tracea.emitters.bank_sim import simulate
from tracea.emitters.layout import TileLayout, TmaSwizzle, XorSwizzle

TARGET_PER_S = 1_000_000


def random_batch(n: int, seed: int = 0) -> AccessBatch:
    rng = np.random.default_rng(seed)
    op = rng.choice(np.array([code for code, _, _ in OPS.values()], dtype=np.int8), n)
    width = np.where(op >= OPS["ldmatrix.x1"][0], 16, rng.choice([1, 2, 4, 8, 16], n)).astype(np.int8)
    width = np.where((op == OPS["cp.async"][0]) & (width < 4), 4, width).astype(np.int8)
    w = width.astype(np.int64)[:, None]
    addr = rng.integers(0, 4096, (n, 32)) // w * w
    addr[rng.random((n, 32)) < 0.1] = INACTIVE
    return AccessBatch(op=op, width=width, addr=addr, count=np.ones(n, dtype=np.int64))


def sweep_batch(n: int) -> AccessBatch:
    tiles = [TileLayout(128, 64, 2), TileLayout(128, 64, 2, swizzle=TmaSwizzle("128B")),
             TileLayout(128, 64, 2, pad_elems=8), TileLayout(64, 128, 2, swizzle=XorSwizzle(8)),
             TileLayout(128, 32, 4, swizzle=TmaSwizzle("128B"))]
    specs = ["ldmatrix.x4", "ldmatrix.x2", "stmatrix.x4", "ld.128.column", "cp.async.128.row", "st.32.column"]
    one = AccessBatch.concat(tile_sweep(t, s) for t in tiles for s in specs)
    reps = -(-n // len(one))
    idx = np.tile(np.arange(len(one)), reps)[:n]
    return AccessBatch(op=one.op[idx], width=one.width[idx], addr=one.addr[idx], count=one.count[idx])


def rate(batch: AccessBatch, repeat: int) -> tuple[float, float]:
    simulate(batch)  # warm-up: page in the arrays, NumPy's first-call costs
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        simulate(batch)
        times.append(time.perf_counter() - t0)
    return len(batch) / statistics.median(times), len(batch) / min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n", type=int, default=1 << 20)
    args = ap.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''} · {os.cpu_count()} CPUs · "
          f"Python {platform.python_version()} · NumPy {np.__version__} · {args.repeat} runs each")
    print(f"{'workload':<12} {'instructions':>12} {'median /s':>12} {'best /s':>12} {'target /s':>10}  verdict")
    failed = False
    for name, batch in (("random", random_batch(args.n)), ("tile sweeps", sweep_batch(args.n))):
        med, best = rate(batch, args.repeat)
        verdict = "ok" if med >= TARGET_PER_S else "MISSED"
        failed |= verdict == "MISSED"
        print(f"{name:<12} {len(batch):>12,} {med:>12,.0f} {best:>12,.0f} {TARGET_PER_S:>10,}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
