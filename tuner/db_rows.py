"""What a well-formed row of the tuning database holds, checked before any command uses it.

SQLite stores what it is given (a REAL column takes the text 'fast'), and the file may have been edited,
written by another tool or damaged. Each check returns None for a good row, else one phrase saying what
is wrong, for the warning that names the row it skips (tuner/db.py).
"""

from __future__ import annotations

import json
import math
from typing import Any

from .recorded import schedule_key
from .trial import STATUSES

RUN_STATES = ("running", "done", "stopped", "interrupted")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _text(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _json_object(name: str, v: Any, nullable: bool = False) -> tuple[Any, str | None]:
    if v is None and nullable:
        return None, None
    if not isinstance(v, str):
        return None, f"{name} is {_text(v)}, not JSON text"
    try:
        obj = json.loads(v)
    except ValueError:
        return None, f"{name} is not valid JSON ({_text(v)})"
    if obj is None and nullable:
        return None, None
    if not isinstance(obj, dict):
        return None, f"{name} is {_text(obj)}, not a JSON object"
    return obj, None


def trial_problem(row: dict[str, Any]) -> str | None:
    for col in ("id", "run_id", "idx"):
        if not _is_int(row.get(col)):
            return f"{col} is {_text(row.get(col))}, not an integer"
    for col in ("key", "name", "schedule_key", "created"):
        if not isinstance(row.get(col), str):
            return f"{col} is {_text(row.get(col))}, not text"
    if row.get("status") not in STATUSES:
        return f"status is {_text(row.get('status'))}, not one of {', '.join(STATUSES)}"
    for col in ("p50_ms", "p95_ms", "min_ms", "rel_err", "compile_s", "seconds"):
        v = row.get(col)
        if v is not None and not _is_number(v):
            return f"{col} is {_text(v)}, not a number"
    for col in ("p50_ms", "p95_ms", "min_ms"):
        v = row.get(col)
        if v is not None and v <= 0:
            return f"{col} is {v}, not a positive time"
    if row["status"] == "ok" and row.get("p50_ms") is None:
        return "status is ok but p50_ms is empty"
    if row.get("runs") is not None and not _is_int(row["runs"]):
        return f"runs is {_text(row['runs'])}, not an integer"
    if row.get("error") is not None and not isinstance(row["error"], str):
        return f"error is {_text(row['error'])}, not text"
    schedule, problem = _json_object("schedule", row.get("schedule"))
    if problem:
        return problem
    if "schema_version" in schedule and not _is_int(schedule["schema_version"]):
        return f"schedule.schema_version is {_text(schedule['schema_version'])}, not an integer"
    for k, v in schedule.items():
        if not isinstance(v, (str, int, float, bool)) and v is not None:
            return f"schedule.{k} is {_text(v)}, not a scalar"
    if schedule_key(schedule) != row["schedule_key"]:
        return "schedule_key does not match its schedule"
    return None


def run_problem(row: dict[str, Any]) -> str | None:
    """A run that cannot be used at all; a bad ``baseline`` alone is ``baseline_problem``."""
    for col in ("id", "seed", "space_size"):
        if not _is_int(row.get(col)):
            return f"{col} is {_text(row.get(col))}, not an integer"
    if row.get("budget") is not None and not _is_int(row["budget"]):
        return f"budget is {_text(row['budget'])}, not an integer"
    for col in ("key", "op_signature", "variant", "backend", "fingerprint", "strategy", "started"):
        if not isinstance(row.get(col), str):
            return f"{col} is {_text(row.get(col))}, not text"
    if row.get("finished") is not None and not isinstance(row["finished"], str):
        return f"finished is {_text(row['finished'])}, not text"
    if row.get("state") not in RUN_STATES:
        return f"state is {_text(row.get('state'))}, not one of {', '.join(RUN_STATES)}"
    for col in ("op", "environment", "options"):
        _, problem = _json_object(col, row.get(col))
        if problem:
            return problem
    return None


def baseline_problem(row: dict[str, Any]) -> str | None:
    """A run's baseline is NULL, JSON null, or an object whose times are positive numbers."""
    baseline, problem = _json_object("baseline", row.get("baseline"), nullable=True)
    if problem or baseline is None:
        return problem
    for k in ("p50_ms", "p95_ms", "tracea_p50_ms", "tracea_p95_ms"):
        v = baseline.get(k)
        if v is not None and not (_is_number(v) and v > 0):
            return f"baseline.{k} is {_text(v)}, not a positive time"
    if baseline.get("rel_err") is not None and not _is_number(baseline["rel_err"]):
        return f"baseline.rel_err is {_text(baseline['rel_err'])}, not a number"
    for k in ("name", "reason"):
        if baseline.get(k) is not None and not isinstance(baseline[k], str):
            return f"baseline.{k} is {_text(baseline[k])}, not text"
    return None
