"""Strategies over the shared cost function, in simulation: every recorded complete space in
tests/fixtures/spaces/ is replayed (a CUDA space recorded on a GPU is picked up when present)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.tuner.recorded import load_recorded
from tracea.tuner.run import Control, Evaluation, SearchLimits, Target, TuneConfig, tune
from tracea.tuner.strategies import make_strategy

SPACES = sorted((Path(__file__).parents[1] / "fixtures" / "spaces").glob("*.json"))


@pytest.fixture(params=SPACES, ids=[p.stem for p in SPACES])
def space(request) -> Path:
    return request.param


def _run(path: Path, strategy: str, seed: int, budget: int, **kw) -> list:
    limits = SearchLimits(strategy=strategy, seed=seed, budget=budget, patience=None, **kw)
    return tune(None, None, TuneConfig(Target(simulate=str(path)), limits=limits)).trials


def test_a_cpu_space_is_recorded_here() -> None:
    cpu = [p for p in SPACES if load_recorded(p).backend == "cpu"]
    assert cpu, "tests/fixtures/spaces/cpu_*.json: record with benchmarks/bench_tuner.py --record"
    rec = load_recorded(cpu[0])
    assert len(rec.trials) >= 200 and sum(t["status"] == "ok" for t in rec.trials) >= 0.9 * len(rec.trials)
    assert all(t["rel_err"] is not None for t in rec.trials if t["status"] == "ok")  # each one verified


def test_exhaustive_finds_the_recorded_optimum(space) -> None:
    rec = load_recorded(space)
    trials = _run(space, "exhaustive", 0, len(rec.trials))
    assert [t.index for t in trials] == list(range(len(rec.trials)))
    assert min(t.objective for t in trials if t.objective) == rec.optimum_ms


@pytest.mark.parametrize("strategy", ["random", "bayes"])
def test_seeded_runs_repeat_start_from_the_hero_and_never_retry(space, strategy) -> None:
    a = [t.index for t in _run(space, strategy, 7, 14)]
    b = [t.index for t in _run(space, strategy, 7, 14)]
    c = [t.index for t in _run(space, strategy, 8, 14)]
    assert a == b and a != c
    assert a[0] == 0 and len(set(a)) == len(a) == 14


@pytest.mark.parametrize("hero_first", [True, False], ids=["hero-first", "no-hero"])
def test_bayes_is_sample_efficient_on_the_recorded_spaces(space, hero_first) -> None:
    """The acceptance (issue 16): >= 0.97 of the optimum within 10 % of the space, median over 10 seeds,
    as `tracea tune` runs it (the hero first) and by the search alone (no hero); and never below random
    search's median (benchmarks/bench_tuner.py has every budget). Fewer seeds do not do: on the CUDA space
    a run either finds the three schedules >= 0.97 (1.7 % of the space) or stops near 0.94, so a median of
    3 follows luck."""
    rec = load_recorded(space)
    budget = math.ceil(0.10 * len(rec.trials))
    scores = {}
    for strategy in ("random", "bayes"):
        found = [min(t.objective for t in _run(space, strategy, s, budget, hero_first=hero_first) if t.objective)
                 for s in range(10)]
        scores[strategy] = statistics.median(rec.optimum_ms / f for f in found)
    assert scores["bayes"] >= 0.97, scores
    assert scores["bayes"] >= scores["random"], scores


def test_failed_candidates_inform_the_search() -> None:
    """A synthetic space: a bowl whose left half fails. After the start, bayes mostly stays off the
    failing half and lands on the optimum; it never proposes a candidate twice."""
    x = np.array([[a, b] for a in np.linspace(0, 1, 20) for b in np.linspace(0, 1, 20)])
    cost = {i: (None if a < 0.5 else 1.0 + (a - 0.8) ** 2 + (b - 0.3) ** 2) for i, (a, b) in enumerate(x)}
    strat = make_strategy("bayes", x, seed=3)
    observed: dict[int, float | None] = {}
    for _ in range(30):
        i = strat.propose(observed)
        assert i not in observed
        observed[i] = cost[i]
    after_start = list(observed)[strat.n_hero + strat.n_init:]
    failing = sum(cost[i] is None for i in after_start)
    assert failing <= len(after_start) // 4
    best = min(v for v in observed.values() if v is not None)
    assert best <= min(v for v in cost.values() if v is not None) * 1.01


def test_budget_time_limit_patience_and_stop(space) -> None:
    n = len(load_recorded(space).trials)
    target = Target(simulate=str(space))
    r = tune(None, None, TuneConfig(target, limits=SearchLimits(strategy="random", budget=5)))
    assert len(r.trials) == 5 and "budget" in r.stop_reason
    r = tune(None, None, TuneConfig(target, limits=SearchLimits(strategy="random", budget=n, patience=3, seed=1)))
    assert "converged" in r.stop_reason and len(r.trials) < n
    r = tune(None, None, TuneConfig(target, Evaluation(simulate_delay_s=0.05),
                                    SearchLimits(strategy="random", budget=n, time_limit_s=0.2, patience=None)))
    assert "time limit" in r.stop_reason and 1 <= len(r.trials) <= 8
    control = Control()
    seen = []

    def stop_after_three(kind, data):
        if kind == "trial":
            seen.append(data["trial"])
            if len(seen) == 3:
                control.stop()

    r = tune(None, None, TuneConfig(target, limits=SearchLimits(strategy="bayes", budget=20)), on_event=stop_after_three,
             control=control)
    assert len(r.trials) == 3 and r.stop_reason == "stopped by the user"


def test_unknown_strategy_and_mismatched_op_are_bad_input(space) -> None:
    from tracea.kernels import Gemm

    with pytest.raises(BadInputError, match="unknown strategy"):
        tune(None, None, TuneConfig(Target(simulate=str(space)), limits=SearchLimits(strategy="annealing")))
    with pytest.raises(BadInputError, match="recorded"):
        tune(Gemm(m=3, n=5, k=7), None, TuneConfig(Target(simulate=str(space))))
