"""Sample efficiency of the tuner's strategies, in simulation over every recorded complete space in
tests/fixtures/spaces/ (CPU spaces recorded here, CUDA spaces recorded on a GPU; the same format).

For each space and seed, random search and the Bayesian strategy replay the space up to 25 % of its
evaluations; the score at a budget is (exhaustive optimum time) / (best time found within the budget),
1.0 = the optimum. The table shows the median over the seeds at 5, 10, 15, 20 and 25 % of the space,
twice: with no hero (the search alone: both strategies start from nothing) and hero first (as `tracea
tune` runs them: both evaluate the hero configuration first, which on a good hero makes them tie early).

    python benchmarks/bench_tuner.py [--seeds 10] [--json] [--fractions 0.05,0.1,0.2] [--derived]
    python benchmarks/bench_tuner.py --record tests/fixtures/spaces/cpu_gemm_512_avx512.json   # measure a space
    python benchmarks/bench_tuner.py --rebaseline FILE   # the space's best vs the baseline, interleaved

``--derived`` also replays spaces made from each recorded one, to check that the strategy is not tuned
to the fixtures: two random 70 % subsets (the hero kept), the times perturbed by 3 % log-normal noise
(near-ties reorder), and another hero (a candidate from the top 5-30 %, not the best) first.

Acceptance (issue 16): bayes >= 0.97 at 10 %, hero first, median of 10 seeds, on every recorded space.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SPACES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "spaces"
FRACTIONS = (0.05, 0.10, 0.15, 0.20, 0.25)


def curve(path: Path, strategy: str, seed: int, budget: int, hero_first: bool) -> list[float | None]:
    """Best-so-far p50 after each evaluation of one simulated run."""
    from tracea.tuner.run import SearchLimits, Target, TuneConfig, tune

    limits = SearchLimits(strategy=strategy, seed=seed, budget=budget, patience=None, hero_first=hero_first)
    result = tune(None, None, TuneConfig(Target(simulate=str(path)), limits=limits))
    best: float | None = None
    out = []
    for t in result.trials:
        v = t.objective
        if v is not None and (best is None or v < best):
            best = v
        out.append(best)
    return out


DERIVED = ("sub-a", "sub-b", "noise", "hero")


def derive(path: Path, kind: str, folder: Path) -> Path:
    """A space made from the recorded one (see the module docstring), seeded by its kind."""
    import zlib

    import numpy as np

    from tracea.tuner.recorded import load_recorded, write_recorded

    rec = load_recorded(path)
    rng = np.random.default_rng(zlib.crc32(f"{path.name}/{kind}".encode()))
    trials, n = rec.trials, len(rec.trials)
    if kind.startswith("sub"):
        keep = sorted(rng.choice(np.arange(1, n), size=int(0.7 * (n - 1)), replace=False).tolist())
        trials = [trials[0]] + [trials[i] for i in keep]
    elif kind == "noise":
        trials = [t | {"p50_ms": t["p50_ms"] * math.exp(rng.normal(0, 0.03))} if t["status"] == "ok" else t
                  for t in trials]
    elif kind == "hero":
        ok = sorted((i for i in range(n) if trials[i]["status"] == "ok"), key=lambda i: trials[i]["p50_ms"])
        h = int(rng.choice(ok[max(1, int(0.05 * len(ok))):max(2, int(0.3 * len(ok)))]))
        trials = [trials[h]] + [t for i, t in enumerate(trials) if i != h]
    rec.trials = trials
    rec.__post_init__()
    out = folder / f"{path.stem}~{kind}.json"
    write_recorded(rec, out)
    return out


def evaluate_space(path: Path, seeds: int, hero_first: bool, fractions: tuple[float, ...] = FRACTIONS) -> dict:
    from tracea.tuner.recorded import load_recorded

    rec = load_recorded(path)
    n = len(rec.trials)
    optimum = rec.optimum_ms
    budgets = [max(1, math.ceil(f * n)) for f in fractions]
    scores: dict[str, list[list[float]]] = {"random": [], "bayes": []}
    t0 = time.monotonic()
    for strategy in scores:
        for seed in range(seeds):
            c = curve(path, strategy, seed, budgets[-1], hero_first)
            scores[strategy].append([(optimum / c[b - 1]) if b - 1 < len(c) and c[b - 1] else 0.0 for b in budgets])
    med = {s: [statistics.median(run[i] for run in scores[s]) for i in range(len(budgets))] for s in scores}
    ok = sum(1 for t in rec.trials if t["status"] == "ok")
    hero_score = (optimum / rec.trials[0]["p50_ms"]) if rec.trials[0]["status"] == "ok" else 0.0
    i10 = min(range(len(fractions)), key=lambda i: abs(fractions[i] - 0.10))
    return {"space": path.stem, "hero_first": hero_first, "hero_score": hero_score, "backend": rec.backend,
            "device": rec.device, "variant": rec.variant,
            "candidates": n, "ok": ok, "optimum_ms": optimum, "budgets": budgets, "fractions": list(fractions),
            "median": med, "seconds": round(time.monotonic() - t0, 1),
            "bayes_97_at_10": med["bayes"][i10] >= 0.97,
            "bayes_beats_random": all(b > r for b, r in zip(med["bayes"], med["random"], strict=True)),
            "bayes_ge_random": all(b >= r for b, r in zip(med["bayes"], med["random"], strict=True))}


def table(results: list[dict], seeds: int) -> str:
    fr = results[0]["fractions"]
    lines = [f"Median over {seeds} seeds of optimum / best-found (1.000 = the exhaustive optimum), random / bayes",
             "", "| space | candidates (ok) | start | " + " | ".join(f"{f:.0%}" for f in fr) + " |",
             "|---|---|---|" + "---|" * len(fr)]
    for r in results:
        start = "hero first" if r["hero_first"] else "no hero"
        cells = " | ".join(f"{a:.3f} / {b:.3f}" for a, b in zip(r["median"]["random"], r["median"]["bayes"], strict=True))
        lines.append(f"| {r['space']} | {r['candidates']} ({r['ok']}) | {start} | {cells} |")
    lines.append("")
    for r in results:
        start = "hero first" if r["hero_first"] else "no hero"
        lines.append(f"{r['space']} ({start}; the hero alone scores {r['hero_score']:.3f}): bayes >= 0.97 at 10 %: "
                     f"{'yes' if r['bayes_97_at_10'] else 'NO'}; bayes > random at every budget: "
                     f"{'yes' if r['bayes_beats_random'] else 'NO'} (>=: {'yes' if r['bayes_ge_random'] else 'no'}); "
                     f"{r['seconds']} s")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- record

RECORD_SHAPES = {  # micro-kernels per family in the recorded spaces
    "cpu-avx512": {(6, 64), (8, 48), (14, 32), (30, 16)},
    "cpu-avx2-fma": {(4, 24), (6, 16), (14, 8), (12, 8)},
}


def record_filter(family: str):
    """The CPU GEMM spaces recorded here: four micro-kernels of the family, three A blocks, three k blocks,
    both B panel widths a 512-wide problem allows, 1 or 2 threads, unroll 1 or 4, no prefetch."""
    shapes = RECORD_SHAPES[family]

    def keep(s) -> bool:
        return ((s.mr, s.nr) in shapes and s.mc in {-(-v // s.mr) * s.mr for v in (64, 128, 256)}
                and s.kc in (128, 256, 512) and s.unroll in (1, 4) and s.prefetch == 0)

    return keep


PASSES = 5


def record(out: Path, m: int, family: str, passes: int = PASSES) -> None:
    """Every candidate verified and timed in ``passes`` exhaustive passes over the space (minutes apart,
    binaries from the compile cache after the first); a candidate's p50 is the median of its passes'
    medians, so a quiet or busy moment on a shared machine does not decide its rank alone."""
    import platform
    import tempfile

    from tracea.doctor import probe
    from tracea.kernels import Gemm
    from tracea.tuner.recorded import RecordedSpace, write_recorded
    from tracea.tuner.run import Evaluation, Outputs, SearchLimits, Target, TuneConfig, tune
    from tracea.tuner.trial import now_iso

    host = probe()
    op = Gemm(m=m, n=m, k=m)
    started = time.monotonic()

    def progress(kind: str, data: dict) -> None:
        if kind == "trial" and data["done"] % 50 == 0:
            print(f"  {data['done']} / {data['budget']}", file=sys.stderr)

    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in range(passes):
            print(f"pass {p + 1} of {passes}", file=sys.stderr)
            config = TuneConfig(Target(variant=f"{family}.gemm", space_filter=record_filter(family)),
                                Evaluation(repeats=10, min_seconds=0.1),
                                SearchLimits(strategy="exhaustive", patience=None, seed=p),
                                Outputs(db_path=os.path.join(tmp, f"pass{p}.sqlite")))
            result = tune(op, host, config, on_event=progress)
            runs.append(sorted(result.trials, key=lambda t: t.index))
    trials = []
    for per in zip(*runs, strict=True):
        ms = [t.measurement for t in per]
        bad = next((m for m in ms if m.status != "ok"), None)
        if bad is not None:
            trials.append({"schedule": per[0].schedule, "status": bad.status, "p50_ms": None, "p95_ms": None,
                           "rel_err": bad.rel_err, "error": bad.error, "compile_s": ms[0].compile_s})
            continue
        trials.append({"schedule": per[0].schedule, "status": "ok",
                       "p50_ms": statistics.median(m.p50_ms for m in ms),
                       "p95_ms": statistics.median(m.p95_ms for m in ms), "rel_err": max(m.rel_err for m in ms),
                       "error": None, "compile_s": ms[0].compile_s, "passes_p50_ms": [m.p50_ms for m in ms]})
    device = f"{host.cpu.model} ({host.cpu.logical_cores} logical cores, {platform.machine()})"
    rec = RecordedSpace(op=op.to_json(), variant=result.variant, backend="cpu", device=device, trials=trials,
                        recorded=now_iso(), baseline=None,
                        command=f"python benchmarks/bench_tuner.py --record {out} --m {m} --family {family} "
                                f"({time.monotonic() - started:.0f} s; {passes} exhaustive passes, each candidate "
                                f">= 10 runs and >= 0.1 s per pass, p50 = median of the passes' medians)")
    write_recorded(rec, out)
    print(f"wrote {out}: {len(trials)} candidates, optimum {rec.optimum_ms:.3f} ms, "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)


def rebaseline(path: Path) -> None:
    """Time the space's best candidate interleaved with the vendor baseline (as `tracea bench` does) and
    store that as the space's baseline: a ratio under equal conditions, with when it was measured."""
    from tracea.doctor import probe
    from tracea.kernels import Op
    from tracea.tuner.config import Evaluation
    from tracea.tuner.evaluate import LiveEvaluator
    from tracea.tuner.recorded import load_recorded, write_recorded
    from tracea.tuner.trial import now_iso

    rec = load_recorded(path)
    best = min((t for t in rec.trials if t["status"] == "ok"), key=lambda t: t["p50_ms"])
    ev = LiveEvaluator(Op.from_json(rec.op), rec.variant, "tracea.emitters.cpu.backend", probe(),
                       Evaluation(repeats=30, min_seconds=1.0, compile_ahead=False))
    try:
        final = ev.final(best["schedule"])
    finally:
        ev.close()
    if not final or not final.get("p50_ms"):
        sys.exit(f"no baseline measurement: {final}")
    rec.baseline = final | {"measured": now_iso(), "note": "the space's best and the baseline timed interleaved"}
    write_recorded(rec, path)
    print(f"{path.name}: best {final['tracea_p50_ms']:.3f} ms, {final['name']} {final['p50_ms']:.3f} ms, "
          f"ratio {final['p50_ms'] / final['tracea_p50_ms']:.2f}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--spaces", type=Path, default=SPACES, help="folder of recorded spaces (*.json)")
    ap.add_argument("--fractions", default=",".join(map(str, FRACTIONS)), help="budgets, as fractions of the space")
    ap.add_argument("--derived", action="store_true", help="also replay spaces derived from each (see above)")
    ap.add_argument("--record", type=Path, help="measure the CPU GEMM space exhaustively into this file")
    ap.add_argument("--rebaseline", type=Path, help="time a recorded space's best against the baseline, interleaved")
    ap.add_argument("--m", type=int, default=512, help="GEMM size to record (m = n = k)")
    ap.add_argument("--family", default="cpu-avx512", choices=sorted(RECORD_SHAPES), help="CPU family to record")
    args = ap.parse_args()
    if args.record:
        record(args.record, args.m, args.family)
        rebaseline(args.record)
        return
    if args.rebaseline:
        rebaseline(args.rebaseline)
        return
    files = sorted(args.spaces.glob("*.json"))
    if not files:
        sys.exit(f"no recorded spaces in {args.spaces}")
    fractions = tuple(float(f) for f in args.fractions.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        if args.derived:
            files = [q for p in files for q in (p, *(derive(p, kind, Path(tmp)) for kind in DERIVED))]
        results = [evaluate_space(p, args.seeds, hero, fractions) for p in files for hero in (False, True)]
    print(json.dumps(results, indent=1) if args.json else table(results, args.seeds))


if __name__ == "__main__":
    main()
