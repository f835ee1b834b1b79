"""The search loop shared by every strategy: propose, compile ahead, evaluate, record, until the budget,
the time limit, convergence (no 0.5 % gain in ``patience`` evaluations), the end of the space, or a stop
from the user. Known results (earlier runs, other processes) count as observed and are never evaluated
again; a failed candidate is observed as a failure and never retried."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tracea.emitters.nvtx import phase as nvtx_phase

from .config import SearchLimits
from .trial import Trial

IMPROVEMENT = 0.005


class Search:
    def __init__(self, strategy: Any, evaluator: Any, schedules: list[dict[str, Any]], names: list[str],
                 observed: dict[int, float | None], trials: list[Trial], limits: SearchLimits, *, control: Any,
                 emit: Callable[[str, dict[str, Any]], None], record: Callable[[Trial], Any]) -> None:
        """``limits.budget`` must be resolved (a number: the run's default or its resumed budget)."""
        if limits.budget is None:
            raise ValueError("Search needs a resolved budget")
        self.strategy, self.evaluator = strategy, evaluator
        self.schedules, self.names = schedules, names
        self.observed = observed
        self.trials = trials  # this run's trials (a resumed run starts with its earlier ones)
        self.budget: int = limits.budget
        self.time_limit_s, self.patience = limits.time_limit_s, limits.patience
        self.control, self.emit, self.record = control, emit, record

    def best(self) -> float | None:
        ok = [v for v in self.observed.values() if v is not None]
        return min(ok) if ok else None

    def stop_rule(self, start: float, since_gain: int) -> str | None:
        """Why no new candidate may start (a stop from the user, the budget, the time limit, patience), or None."""
        if self.control.stopped:
            return "stopped by the user"
        if len(self.trials) >= self.budget:
            return f"budget of {self.budget} evaluations reached"
        if self.time_limit_s is not None and time.monotonic() - start >= self.time_limit_s:
            return f"time limit of {self.time_limit_s:g} s reached"
        if self.patience is not None and since_gain >= self.patience:
            return f"converged: no {IMPROVEMENT:.1%} gain in {self.patience} evaluations"
        return None

    def run(self) -> str:
        start = time.monotonic()
        since_gain = 0
        best = self.best()
        while True:
            self.control.wait_if_paused()
            reason = self.stop_rule(start, since_gain)
            if reason is not None:
                return reason
            with nvtx_phase("host", "tune"):  # the strategy's model and choice (NVTX, emitters/nvtx.py)
                index = self.strategy.propose(self.observed)
            if index is None or index in self.observed:
                return "the space is exhausted" if len(self.observed) >= len(self.schedules) else "strategy finished"
            self.evaluator.prefetch([self.schedules[i] for i in self.strategy.upcoming(self.observed, index, 2)])
            name = self.names[index]
            t0 = time.monotonic()
            m = self.evaluator.evaluate(
                self.schedules[index],
                on_phase=lambda p, i=index, n=name: self.emit("phase", {"index": i, "name": n, "phase": p}),
                index=index)
            trial = Trial(index, self.schedules[index], name, m, time.monotonic() - t0)
            best, since_gain = self.take(trial, best, since_gain, start)

    def take(self, trial: Trial, best: float | None, since_gain: int, start: float,
             **extra: Any) -> tuple[float | None, int]:
        """Record ``trial`` (committed before anything else starts), observe it, announce it (with ``extra``
        in the event); the new (best, evaluations since a 0.5 % gain)."""
        self.record(trial)
        self.trials.append(trial)
        self.observed[trial.index] = value = trial.objective
        since_gain = 0 if value is not None and (best is None or value < best * (1 - IMPROVEMENT)) else since_gain + 1
        if value is not None and (best is None or value < best):
            best = value
        self.emit("trial", {"trial": trial, "best_ms": best, "done": len(self.trials), "budget": self.budget,
                            "elapsed_s": time.monotonic() - start, **extra})
        return best, since_gain
