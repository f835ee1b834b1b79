"""Tracea's L6 optimizer: search spaces, strategies (exhaustive, random, Bayesian), evaluation workers and
the tuning database.

    from tracea.tuner import tune, SearchLimits, TuneConfig
    result = tune(op, host, TuneConfig(limits=SearchLimits(budget=20)))
    result.best["schedule"], result.best["p50_ms"]

Importing this package is light: NumPy, scikit-learn and SQLite load when a run starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tune", "TuneConfig", "Target", "Evaluation", "SearchLimits", "Outputs", "TuneResult", "Control",
           "TuningDB", "stored_schedule"]


def __getattr__(name: str) -> Any:
    if name in ("tune", "TuneConfig", "TuneResult", "Control"):
        from . import run

        return getattr(run, name)
    if name in ("Target", "Evaluation", "SearchLimits", "Outputs"):
        from . import config

        return getattr(config, name)
    if name == "TuningDB":
        from .db import TuningDB

        return TuningDB
    if name == "stored_schedule":
        from .lookup import stored_schedule

        return stored_schedule
    raise AttributeError(name)
