"""The search loop over a pool of members (tuner/pool.py): up to one candidate in flight per member.

Batches come from the same strategies through a constant liar (Ginsbourger et al., 2010): while
candidates are in flight, the strategy is shown each of them as already observed at the best time seen so
far (none yet: as a failure), so it proposes something else, and proposes again with the truth when they
come back. Random and exhaustive strategies just skip them. The stopping rules are the serial loop's
(budget, time limit, patience in the order results arrive, the end of the space, a stop from the user);
candidates in flight when a rule fires still finish and are recorded. A candidate whose member was lost
goes back to the strategy once; lost a second time, it is recorded as a runtime failure naming both losses.
"""

from __future__ import annotations

import time
from typing import Any

from .search import Search
from .trial import Measurement, Trial


class ParallelSearch(Search):
    """``Search`` with a pool (``evaluator``: LocalPool or RayPool) in place of one evaluator."""

    def _lies(self, in_flight: dict[int, float]) -> dict[int, float | None]:
        ok = [v for v in self.observed.values() if v is not None]
        lie = min(ok) if ok else None
        return {**self.observed, **{i: lie for i in in_flight}}

    def _fill(self, in_flight: dict[int, float]) -> str | None:
        """Start candidates on idle members while the budget allows; a reason when the strategy has none
        left (with nothing in flight that could change its mind)."""
        pool = self.evaluator
        while pool.idle and len(self.trials) + len(in_flight) < self.budget:
            index = self.strategy.propose(self._lies(in_flight))
            if index is None or index in self.observed or index in in_flight:
                if in_flight:
                    return None
                return "the space is exhausted" if len(self.observed) >= len(self.schedules) else "strategy finished"
            name = self.names[index]
            member = pool.submit(index, self.schedules[index], on_phase=lambda m, p, i=index, n=name: self.emit(
                "phase", {"index": i, "name": n, "phase": p, "member": m}))
            in_flight[index] = time.monotonic()
            self.emit("phase", {"index": index, "name": name, "phase": "queued", "member": member})
        return None

    def run(self) -> str:
        start = time.monotonic()
        since_gain, best = 0, self.best()
        in_flight: dict[int, float] = {}
        losses: dict[int, list[str]] = {}
        reason: str | None = None
        while True:
            self.control.wait_if_paused()
            reason = reason or self.stop_rule(start, since_gain)
            if reason is None:
                reason = self._fill(in_flight)
            if not in_flight:
                return reason or "strategy finished"
            for done in self.evaluator.wait():
                in_flight.pop(done.index, None)
                if getattr(done, "fatal", None) is not None:
                    raise done.fatal
                m = self._measurement(done, losses)
                if m is None:  # lost once: back to the strategy
                    continue
                trial = Trial(done.index, self.schedules[done.index], self.names[done.index], m, done.seconds)
                best, since_gain = self.take(trial, best, since_gain, start, member=done.member)

    def _measurement(self, done: Any, losses: dict[int, list[str]]) -> Measurement | None:
        if done.lost is None:
            return done.measurement
        seen = losses.setdefault(done.index, [])
        seen.append(f"member {done.member}: {done.lost}")
        self.emit("phase", {"index": done.index, "name": self.names[done.index], "phase": "lost",
                            "member": done.member})
        if len(seen) == 1:
            return None
        return Measurement("runtime_failed", error="its worker was lost twice (" + "; ".join(seen) + ")")
