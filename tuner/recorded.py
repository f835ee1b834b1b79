"""Recorded complete spaces: every candidate of one space measured once, for ``--simulate`` and the
sample-efficiency benchmark. One JSON format for every backend (schema_version 1):

    {"schema_version": 1, "op": op.to_json(), "variant": "<id>", "backend": "cpu|cuda",
     "device": "<cpu model or GPU name>", "recorded": "<iso time>", "command": "<how>",
     "baseline": {"name": ..., "p50_ms": ...} (optional), "complete": true|false (optional),
     "trials": [{"schedule": schedule.to_json(), "status": "...", "p50_ms": float|null,
                 "p95_ms": float|null, "rel_err": float|null, "error": str|null}, ...]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError

from .trial import STATUSES, Measurement

SCHEMA_VERSION = 1


def schedule_key(schedule: dict[str, Any]) -> str:
    """A canonical text for a schedule's JSON: equal schedules, equal keys."""
    return json.dumps(schedule, sort_keys=True, separators=(",", ":"))


@dataclass
class RecordedSpace:
    op: dict[str, Any]
    variant: str
    backend: str
    device: str
    trials: list[dict[str, Any]]
    recorded: str = ""
    command: str = ""
    baseline: dict[str, Any] | None = None
    path: str = ""
    complete: bool | None = None  # False: a partial recording (a dry run, or stopped); None: not said
    _index: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._index = {schedule_key(t["schedule"]): t for t in self.trials}

    @property
    def schedules(self) -> list[dict[str, Any]]:
        return [t["schedule"] for t in self.trials]

    def lookup(self, schedule: dict[str, Any]) -> Measurement | None:
        t = self._index.get(schedule_key(schedule))
        if t is None:
            return None
        return Measurement(t["status"], p50_ms=t.get("p50_ms"), p95_ms=t.get("p95_ms"), rel_err=t.get("rel_err"),
                           error=t.get("error"), compile_s=t.get("compile_s"))

    @property
    def optimum_ms(self) -> float | None:
        ok = [t["p50_ms"] for t in self.trials if t["status"] == "ok" and t.get("p50_ms") is not None]
        return min(ok) if ok else None

    def to_json(self) -> dict[str, Any]:
        doc = {"schema_version": SCHEMA_VERSION, "op": self.op, "variant": self.variant, "backend": self.backend,
               "device": self.device, "recorded": self.recorded, "command": self.command}
        if self.baseline is not None:
            doc["baseline"] = self.baseline
        if self.complete is not None:
            doc["complete"] = self.complete
        return doc | {"trials": self.trials}


MAX_BYTES = 256 * 2**20  # the largest recorded spaces are a few MiB; more is not one of ours


def load_recorded(path: str | Path) -> RecordedSpace:
    """Read and validate a recorded space: any file that is not one (binary, not JSON, another schema,
    a field of the wrong type) is a ``BadInputError`` naming the file and what is wrong."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_BYTES:
            raise BadInputError(f"{p}: {p.stat().st_size} bytes is too large for a recorded space")
        text = p.read_bytes().decode("utf-8")
        doc = json.loads(text)
    except OSError as exc:
        raise BadInputError(f"cannot read {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BadInputError(f"{p} is not a recorded space: not UTF-8 text (a binary file?)") from None
    except json.JSONDecodeError as exc:
        raise BadInputError(f"{p} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise BadInputError(f"{p} is not a recorded space: JSON nested too deeply") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise BadInputError(f"{p}: not a recorded space (expected schema_version {SCHEMA_VERSION})")
    for key in ("op", "variant", "backend", "trials"):
        if key not in doc:
            raise BadInputError(f"{p}: recorded space lacks {key!r}")
    _check_fields(p, doc)
    return RecordedSpace(op=doc["op"], variant=doc["variant"], backend=doc["backend"], device=doc.get("device", ""),
                         trials=doc["trials"], recorded=doc.get("recorded", ""), command=doc.get("command", ""),
                         baseline=doc.get("baseline"), path=str(p), complete=doc.get("complete"))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_fields(p: Path, doc: dict[str, Any]) -> None:
    from tracea.kernels import Op

    for key in ("variant", "backend", "device", "recorded", "command"):
        if not isinstance(doc.get(key, ""), str):
            raise BadInputError(f"{p}: {key!r} must be a string")
    if not isinstance(doc["op"], dict):
        raise BadInputError(f"{p}: 'op' must be an object (an operation's JSON)")
    try:
        Op.from_json(doc["op"])
    except BadInputError as exc:
        raise BadInputError(f"{p}: 'op': {exc.message}") from None
    if doc.get("complete") is not None and not isinstance(doc["complete"], bool):
        raise BadInputError(f"{p}: 'complete' must be true, false or null")
    if doc.get("baseline") is not None and not isinstance(doc["baseline"], dict):
        raise BadInputError(f"{p}: 'baseline' must be an object or null")
    trials = doc["trials"]
    if not isinstance(trials, list) or not trials:
        raise BadInputError(f"{p}: \"trials\" must be a non-empty list")
    for i, t in enumerate(trials):
        if not isinstance(t, dict) or not isinstance(t.get("schedule"), dict) or t.get("status") not in STATUSES:
            raise BadInputError(f"{p}: trial {i} needs a schedule object and a status in {', '.join(STATUSES)}")
        if t["status"] == "ok" and not _number(t.get("p50_ms")):
            raise BadInputError(f"{p}: trial {i} is ok but has no p50_ms")
        for key in ("p50_ms", "p95_ms", "rel_err", "compile_s"):
            if t.get(key) is not None and not _number(t[key]):
                raise BadInputError(f"{p}: trial {i}: {key!r} must be a number or null, got {t[key]!r}")
        if t.get("error") is not None and not isinstance(t["error"], str):
            raise BadInputError(f"{p}: trial {i}: 'error' must be a string or null")


def write_recorded(space: RecordedSpace, path: str | Path) -> None:
    """Atomically (``doctor.files.write_atomic``: temporary file, fsync, rename)."""
    from tracea.doctor.files import write_atomic

    write_atomic(Path(path), json.dumps(space.to_json(), indent=1) + "\n")
