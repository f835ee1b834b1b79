"""The best stored schedule for (op, variant) on this host: what ``tracea bench`` and ``tracea.Context``
use automatically. A miss (no database, another fingerprint, nothing verified yet) is None.

The database is opened read-only (a read-only file is still used), and a stored schedule that this
Tracea's schedule class cannot read, or refuses for the op on this host, is skipped with a warning naming its row,
in favour of the next best."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def _parser(backend: str, op: Any, variant: str, host: Any) -> Callable[[dict[str, Any]], Any] | None:
    """The backend's ``schedule_from_json`` followed by its ``validate_schedule`` for ``op`` on ``host`` (a row
    that a later Tracea refuses, say a field it no longer accepts, is skipped), or None when it cannot be had."""
    from tracea.emitters import registry

    try:
        b = registry.backend(backend)
        parse, check = b.schedule_from_json, b.validate_schedule
    except Exception:  # noqa: BLE001 - no parser: the caller's own build says what is wrong
        return None

    def parse_and_check(d: dict[str, Any]) -> Any:
        schedule = parse(d)
        check(op, variant, schedule, host)
        return schedule

    return parse_and_check


def stored_schedule(op: Any, variant: str, host: Any, backend: str, db_path: str | None = None) -> dict[str, Any] | None:
    from tracea.emitters.registry import fingerprint

    from .db import TuningDB, default_path, tuning_key

    if db_path is None and not default_path().exists():
        return None  # never create a database just to look something up
    db = TuningDB.reader(db_path)
    try:
        parse = None
        for row in db.ranked(tuning_key(op.signature, variant, fingerprint(host, backend))):
            schedule = json.loads(row["schedule"])
            parse = parse or _parser(backend, op, variant, host)
            if parse is None:
                return schedule
            try:
                parse(schedule)
            except Exception as exc:  # noqa: BLE001 - a schedule this Tracea cannot read is a bad row, not a crash
                db.warn(f"tuning database {db.path}: trials row {row['id']} skipped: its schedule is refused "
                        f"({getattr(exc, 'message', exc)})")
                continue
            return schedule
        return None
    finally:
        db.close()


def tuned_lookup(host: Any, backend: str, db_path: str | None = None) -> Callable[[Any, str], dict[str, Any] | None]:
    """The ``tuned(op, variant_id)`` callable ``emitters.bench.bench`` takes."""
    return lambda op, variant: stored_schedule(op, variant, host, backend, db_path)
