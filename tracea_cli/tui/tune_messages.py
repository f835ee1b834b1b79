"""Every message the tuning dashboard's worker posts (the worker runs the search in a thread and never
touches widgets; the app's handlers update them on the UI thread)."""

from __future__ import annotations

from typing import Any

from textual.message import Message


class TuneStarted(Message):
    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__()
        self.info = info  # op, variant, backend, space_size, budget, strategy, known, run_id, resumed, simulated


class BaselineMeasured(Message):
    def __init__(self, baseline: dict[str, Any] | None) -> None:
        super().__init__()
        self.baseline = baseline


class PhaseChanged(Message):
    """The candidate being evaluated and its phase: compile, verify, run (or baseline); ``member``: which worker
    of a pool (``--workers``), None for one worker."""

    def __init__(self, index: int | None, name: str, phase: str, member: int | None = None) -> None:
        super().__init__()
        self.index, self.name, self.phase, self.member = index, name, phase, member


class TrialFinished(Message):
    def __init__(self, trial: Any, best_ms: float | None, done: int, budget: int, elapsed_s: float,
                 member: int | None = None) -> None:
        super().__init__()
        self.trial, self.best_ms, self.done, self.budget, self.elapsed_s = trial, best_ms, done, budget, elapsed_s
        self.member = member


class TuneFinished(Message):
    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result


class TuneFailed(Message):
    """The run raised (bad input, missing toolchain, ...): the error text, shown and kept."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class Hush(Message):
    """The search is about to time a candidate or the baseline: the app draws what it has, then sets
    ``drawn`` and holds its updates until timing ends (the worker's thread waits on ``drawn``)."""

    def __init__(self, drawn: Any) -> None:
        super().__init__()
        self.drawn = drawn  # a threading.Event
