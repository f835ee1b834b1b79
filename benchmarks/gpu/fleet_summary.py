"""Tables for benchmarks/gpu/tune_fleet_gpu.sh (issue 20), from its JSON outputs and walls.txt.

    python benchmarks/gpu/fleet_summary.py suite ONE_GPU.json ALL_GPUS.json walls.txt
    python benchmarks/gpu/fleet_summary.py one SERIAL.json RAY.json walls.txt
    python benchmarks/gpu/fleet_summary.py rows SUITE.json
    python benchmarks/gpu/fleet_summary.py db TUNING.sqlite      # where each run's time went
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _walls(path: str) -> dict[str, float]:
    out = {}
    for line in Path(path).read_text().splitlines():
        parts = dict(p.split("=", 1) for p in line.split()[1:] if "=" in p)
        out[line.split()[0]] = float(parts["wall_s"])
    return out


def _load(path: str) -> object:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"{path}: no result ({exc})")
        return None


def rows(path: str) -> list[dict]:
    data = _load(path) or []
    print(f"{'problem':8s} {'lane':>4s} {'evaluated':>9s} {'best':40s} {'ms':>9s} {'vs vendor':>9s} {'s':>6s}")
    for r in data:
        if r.get("best") is None:
            print(f"{r['problem']:8s} no verified best: {r.get('error') or r.get('stop')}")
            continue
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") else "-"
        print(f"{r['problem']:8s} {r.get('lane', '-')!s:>4s} {r['evaluated']:>9d} {r['best'][:40]:40s} "
              f"{r['best_ms']:9.4f} {ratio:>9s} {r['seconds']:6.1f}")
    return data


def suite(one: str, alln: str, walls: str) -> None:
    """The wall times are walls.txt's lines named as the two JSON files (suite_one_gpu_1.json: suite_one_gpu_1)."""
    w = _walls(walls)
    print("== one GPU")
    a = rows(one)
    print("== every GPU (lanes)")
    b = rows(alln)
    same = sum(1 for x, y in zip(a, b, strict=False) if x.get("best") and x.get("best") == y.get("best"))
    gpus = len({r.get("lane") for r in b if r.get("lane") is not None}) or 1
    t1, tn = w.get(Path(one).stem), w.get(Path(alln).stem)
    print(f"problems {len(a)} / {len(b)}; same best schedule in {same}")
    print(f"evaluations: one GPU {sum(r.get('evaluated') or 0 for r in a)}, every GPU {sum(r.get('evaluated') or 0 for r in b)}")
    if t1 and tn:
        print(f"wall: one GPU {t1:.1f} s, {gpus} GPUs {tn:.1f} s: speed-up {t1 / tn:.2f}x "
              f"({t1 / tn / gpus:.2f} of the GPU count)")


def one(serial: str, ray: str, walls: str) -> None:
    w = _walls(walls)
    for name, path in (("serial_one_gpu", serial), ("ray_one_gpu", ray)):
        d = _load(path)
        if not d:
            continue
        secs = [t["seconds"] for t in d["trials"]]
        print(f"{name:15s} evaluated {d['evaluated']:3d} best {d['best']['name'] if d['best'] else None} "
              f"{d['best']['p50_ms'] if d['best'] else float('nan'):.4f} ms  run {d['elapsed_s']:.1f} s  "
              f"command {w.get(name, float('nan')):.1f} s  per candidate: median {statistics.median(secs):.2f} s "
              f"mean {statistics.mean(secs):.2f} s  run/evaluated {d['elapsed_s'] / max(1, d['evaluated']):.2f} s")


def db(path: str) -> None:
    """Per run: its span (start to finish, whole seconds), the span before its first trial (the baseline),
    its trials' own seconds (median, sum) and compile seconds (median)."""
    import datetime as dt
    import sqlite3

    def t(s: str) -> float:
        return dt.datetime.fromisoformat(s).timestamp()

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    print(f"{'run':>3s} {'op':44s} {'span s':>6s} {'to 1st':>6s} {'trials':>6s} {'med s':>6s} {'sum s':>6s} "
          f"{'med compile':>11s}")
    for rid, sig, started, finished in con.execute("SELECT id, op_signature, started, finished FROM runs ORDER BY id"):
        rows = con.execute("SELECT seconds, compile_s, created FROM trials WHERE run_id=? ORDER BY id", (rid,)).fetchall()
        secs = [r[0] or 0.0 for r in rows]
        comp = [r[1] for r in rows if r[1] is not None]
        span = t(finished) - t(started) if finished else float("nan")
        first = t(rows[0][2]) - t(started) if rows else float("nan")
        print(f"{rid:3d} {sig[:44]:44s} {span:6.0f} {first:6.0f} {len(rows):6d} "
              f"{statistics.median(secs) if secs else 0:6.2f} {sum(secs):6.1f} "
              f"{statistics.median(comp) if comp else 0:11.2f}")


if __name__ == "__main__":
    {"suite": suite, "one": one, "rows": rows, "db": db}[sys.argv[1]](*sys.argv[2:])
