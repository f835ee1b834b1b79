"""Metrics rows: one schema for CSV and JSONL (DESIGN.md), written by bench and tune."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("ok", "invalid", "compile_failed", "runtime_failed", "wrong_result", "timeout")


@dataclass(frozen=True)
class MetricsRow:
    timestamp: str
    op: str
    shape: str
    dtype: str
    backend: str
    variant: str
    schedule: str  # JSON of the schedule
    status: str
    p50_ms: float | None
    p95_ms: float | None
    tflops: float | None
    gbps: float | None
    rel_err: float | None
    baseline: str | None
    baseline_p50_ms: float | None
    ratio: float | None  # baseline time / Tracea time: > 1 means Tracea is faster
    env_fingerprint: str
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


FIELDS = list(MetricsRow.__dataclass_fields__)


def to_jsonl(rows: list[MetricsRow]) -> str:
    return "".join(json.dumps(r.to_json(), sort_keys=False) + "\n" for r in rows)


def to_csv(rows: list[MetricsRow]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in r.to_json().items()})
    return buf.getvalue()
