"""The best stored schedule for (op, variant) on this host: what ``tracea bench`` and ``tracea.Context``
use automatically. A miss (no database, another fingerprint, nothing verified yet) is None."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def stored_schedule(op: Any, variant: str, host: Any, backend: str, db_path: str | None = None) -> dict[str, Any] | None:
    from tracea.doctor.fingerprint import fingerprint

    from .db import TuningDB, default_path, tuning_key

    if db_path is None and not default_path().exists():
        return None  # never create a database just to look something up
    db = TuningDB(db_path)
    try:
        best = db.best(tuning_key(op.signature, variant, fingerprint(host, backend)))
    finally:
        db.close()
    return json.loads(best["schedule"]) if best else None


def tuned_lookup(host: Any, backend: str, db_path: str | None = None) -> Callable[[Any, str], dict[str, Any] | None]:
    """The ``tuned(op, variant_id)`` callable ``emitters.bench.bench`` takes."""
    return lambda op, variant: stored_schedule(op, variant, host, backend, db_path)
