"""The values a tuning run produces: a ``Measurement`` per candidate and a ``Trial`` that pins it to the
schedule it measured. Statuses are the metrics schema's (reports/metrics.py)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("ok", "invalid", "compile_failed", "runtime_failed", "wrong_result", "timeout")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Measurement:
    status: str
    p50_ms: float | None = None
    p95_ms: float | None = None
    min_ms: float | None = None
    runs: int | None = None
    rel_err: float | None = None
    error: str | None = None
    compile_s: float | None = None
    cache_hit: bool | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.p50_ms is not None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Measurement:
        names = set(Measurement.__dataclass_fields__)
        return Measurement(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Trial:
    """One evaluated candidate: its index in the run's space, the schedule and what was measured."""

    index: int
    schedule: dict[str, Any]  # schedule.to_json()
    name: str
    measurement: Measurement
    seconds: float = 0.0  # wall time of the evaluation (compile + verify + timing)
    timestamp: str = field(default_factory=now_iso)

    @property
    def objective(self) -> float | None:
        """What the search minimises: the median time in ms, None for a failed candidate."""
        return self.measurement.p50_ms if self.measurement.ok else None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "schedule": self.schedule, "name": self.name, "seconds": self.seconds,
                "timestamp": self.timestamp, **self.measurement.to_json()}
