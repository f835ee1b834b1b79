"""Whole-process timings of the commands a user waits on: `tracea --help`, `tracea doctor --json`,
and a Tab-completion round trip. Prints a table (median, p95, min over N runs) and checks the targets
of issue 30 on the CI-class machine (2 vCPUs): median `tracea --help` <= 0.15 s, `tracea doctor --json`
<= 0.4 s (the doctor issue's were 0.3 s and 0.5 s).

    python benchmarks/bench_startup.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

TARGETS_S = {"tracea --help": 0.15, "tracea doctor --json": 0.4}


def time_command(argv: list[str], repeat: int, env: dict[str, str] | None = None) -> list[float]:
    subprocess.run(argv, capture_output=True, env=env, check=False)  # warm the page cache once
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run(argv, capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.decode()[-500:]}")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    tracea = shutil.which("tracea")
    if tracea is None:
        raise SystemExit("tracea is not on PATH: pip install -e . first")
    complete_env = {**os.environ, "_TRACEA_COMPLETE": "complete_bash", "COMP_WORDS": "tracea doc", "COMP_CWORD": "1"}
    cases = [
        ("tracea --help", [tracea, "--help"], None),
        ("tracea doctor --json", [tracea, "doctor", "--json"], None),
        ("Tab completion (bash)", [tracea], complete_env),
        ("python -c pass (floor)", [sys.executable, "-c", "pass"], None),
    ]
    print(f"machine: {platform.machine()} {platform.processor() or ''} · "
          f"{os.cpu_count()} CPUs · Python {platform.python_version()} · {args.repeat} runs each")
    print(f"{'command':<26} {'median s':>9} {'p95 s':>8} {'min s':>8} {'target s':>9}  verdict")
    failed = False
    for name, argv, env in cases:
        t = sorted(time_command(argv, args.repeat, env))
        med = statistics.median(t)
        p95 = t[min(len(t) - 1, round(0.95 * (len(t) - 1)))]
        target = TARGETS_S.get(name)
        verdict = "" if target is None else ("ok" if med <= target else "MISSED")
        failed |= verdict == "MISSED"
        print(f"{name:<26} {med:>9.3f} {p95:>8.3f} {t[0]:>8.3f} {target if target else '-':>9}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
