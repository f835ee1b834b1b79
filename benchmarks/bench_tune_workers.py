"""Tuning with several workers (issue 20): wall time and seconds per candidate of the same search serially,
with ``--workers N`` local processes, and with N Ray actors on a private local Ray instance.

Two parts:
- a recorded space replayed with a fixed cost per answer (``--delay`` s): the pool's own overhead, and its
  speed-up against the ideal N, with nothing else competing for the cores;
- a real CPU GEMM (fp32, one thread per candidate so that N workers fit N cores), exhaustive over a
  restricted space: the best schedule of each run, and the wall times.

    python benchmarks/bench_tune_workers.py [--workers 2] [--delay 0.3] [--m 256] [--skip-ray]

Prints one row per run: mode, candidates, set-up s (to the search's start: workers or Ray actors made; a
live run's baseline comes after it), search s, s per candidate, the search's speed-up over serial, the best
schedule and its time. Each run has a fresh TRACEA_HOME, so each compiles its own candidates. The CPU rows depend on this machine's cores: name them with the figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from tracea.tuner.config import Outputs, SearchLimits
from tracea.tuner.run import Evaluation, Target, TuneConfig, tune

SPACE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "spaces" / "cpu_gemm_512_avx512.json"
CPU_SPACE = """[restrict]
threads = [1]
kc = [256]
nc = [256]
prefetch = [0]
unroll = [2]
"""


def run(label: str, make_config, op=None, host=None) -> dict:
    """One run in a fresh TRACEA_HOME (no build cache from the run before: each compiles its candidates);
    ``setup`` is the time to the search's start (the pool's workers or Ray actors made), ``wall`` the rest."""
    os.environ["TRACEA_HOME"] = tempfile.mkdtemp(prefix="tracea-workers-home-")
    marks: dict[str, float] = {}
    t = time.perf_counter()
    r = tune(op, host, make_config(), on_event=lambda kind, data: marks.setdefault(kind, time.perf_counter()))
    end = time.perf_counter()
    start = marks.get("start", t)
    return {"mode": label, "n": len(r.trials), "setup": start - t, "wall": end - start,
            "best": r.best["name"] if r.best else None, "best_ms": r.best["p50_ms"] if r.best else None,
            "ok": sum(t.measurement.ok for t in r.trials)}


def table(rows: list[dict]) -> None:
    base = rows[0]["wall"]
    print(f"{'mode':<20} {'cands':>5} {'ok':>4} {'setup s':>8} {'search s':>9} {'s/cand':>7} {'speed-up':>9}  best")
    for r in rows:
        best = f"{r['best']} {r['best_ms']:.4f} ms" if r["best"] else "-"
        print(f"{r['mode']:<20} {r['n']:>5} {r['ok']:>4} {r['setup']:8.2f} {r['wall']:9.2f} "
              f"{r['wall'] / max(r['n'], 1):7.3f} {base / r['wall']:8.2f}x  {best}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--delay", type=float, default=0.3, help="seconds per replayed answer")
    ap.add_argument("--budget", type=int, default=40, help="candidates of the replayed search")
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--skip-ray", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    w = args.workers
    modes = [("serial", 1, None), (f"--workers {w}", w, None)] + ([] if args.skip_ray else [(f"--workers {w} Ray", w, "local")])

    def replay(workers, cluster):
        return lambda: TuneConfig(Target(simulate=str(SPACE)),
                                  evaluation=Evaluation(workers=workers, cluster=cluster, simulate_delay_s=args.delay),
                                  limits=SearchLimits(strategy="random", budget=args.budget, seed=1, patience=None))

    print(f"replayed space {SPACE.name}, {args.delay:g} s an answer, {args.budget} candidates (ideal: {w}x)")
    table([run(label, replay(n, c)) for label, n, c in modes])

    from tracea.doctor import probe
    from tracea.kernels import Gemm

    host, op = probe(), Gemm(args.m, args.m, args.m)
    tmp = Path(tempfile.mkdtemp(prefix="tracea-workers-"))
    (tmp / "space.toml").write_text(CPU_SPACE)

    def live(workers, cluster, label):
        return lambda: TuneConfig(Target(backend="cpu", space_file=str(tmp / "space.toml")),
                                  evaluation=Evaluation(workers=workers, cluster=cluster, repeats=20, warmup=3),
                                  limits=SearchLimits(strategy="exhaustive", retune=True),
                                  outputs=Outputs(db_path=str(tmp / f"{label}.sqlite")))

    print(f"\nreal CPU GEMM {args.m}^3 fp32, one thread a candidate, exhaustive; {host.cpu.model} "
          f"({len(os.sched_getaffinity(0))} cores usable)")
    table([run(label, live(n, c, i), op, host) for i, (label, n, c) in enumerate(modes)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
