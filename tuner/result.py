"""What a tuning run answers: ``TuneResult`` (the best verified trial under the key, the baseline, every
trial this run evaluated and why the search stopped; its JSON), and ``_best_of``, the best verified trial
among a key's stored rows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .trial import Trial


@dataclass
class TuneResult:
    op: Any
    variant: str
    backend: str
    key: str
    fingerprint: str
    strategy: str
    space_size: int
    run_id: int | None
    reused: bool
    trials: list[Trial]  # evaluated by this run (resumed: the run's earlier trials too)
    best: dict[str, Any] | None  # the best verified trial under the key: schedule, name, p50_ms, ...
    baseline: dict[str, Any] | None
    stop_reason: str
    elapsed_s: float
    db_path: str
    simulated: bool = False
    run_dir: str | None = None
    pruned: list[str] = field(default_factory=list)  # candidates the bank-conflict rule dropped, with why

    @property
    def best_tflops(self) -> float | None:
        return self.op.flops / (self.best["p50_ms"] * 1e-3) / 1e12 if self.best else None

    @property
    def ratio(self) -> float | None:
        """Baseline time / best time (> 1: the tuned kernel is faster than the vendor library); from the
        final interleaved timing of the two where the run made one."""
        base = self.baseline or {}
        b = base.get("p50_ms")
        if b and base.get("tracea_p50_ms"):
            return b / base["tracea_p50_ms"]
        return b / self.best["p50_ms"] if b and self.best else None

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for t in self.trials:
            counts[t.measurement.status] = counts.get(t.measurement.status, 0) + 1
        return {
            "schema_version": 1, "op": self.op.to_json(), "variant": self.variant, "backend": self.backend,
            "key": self.key, "env_fingerprint": self.fingerprint, "strategy": self.strategy,
            "space_size": self.space_size, "run_id": self.run_id, "reused": self.reused, "simulated": self.simulated,
            "evaluated": len(self.trials), "statuses": counts, "stop_reason": self.stop_reason,
            "elapsed_s": round(self.elapsed_s, 3), "best": self.best, "best_tflops": self.best_tflops,
            "baseline": self.baseline, "ratio_to_baseline": self.ratio, "database": self.db_path,
            "run_dir": self.run_dir, "pruned_bank_conflicts": self.pruned, "trials": [t.to_json() for t in self.trials],
        }


def _best_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in rows if r["status"] == "ok" and r.get("p50_ms") is not None]
    if not ok:
        return None
    b = min(ok, key=lambda r: r["p50_ms"])
    sched = b["schedule"] if isinstance(b["schedule"], dict) else json.loads(b["schedule"])
    return {"name": b["name"], "schedule": sched, "p50_ms": b["p50_ms"], "p95_ms": b.get("p95_ms"),
            "rel_err": b.get("rel_err"), "trial_id": b.get("id")}
