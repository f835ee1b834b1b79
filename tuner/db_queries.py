"""The tuning database's reads (``Queries``, the base of ``TuningDB`` in tuner/db.py): runs and trials read
back, a malformed row or a trial of no run skipped with a warning (tuner/db_rows.py says what is wrong with
a row), a key's verified trials fastest first, one line per key, and the export."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .db_rows import baseline_problem, run_problem, trial_problem
from .db_schema import ORPHANS, SCHEMA_VERSION
from .trial import now_iso


class Queries:
    """What ``TuningDB`` reads; they use its connection, path, warnings and list of skipped rows."""

    conn: sqlite3.Connection
    path: Path
    skipped: list[dict[str, Any]]
    warn: Callable[[str], None]

    def _runs(self, cond: str = "1", args: tuple[Any, ...] = (), order: str = "id") -> list[dict[str, Any]]:
        out = []
        for r in self.conn.execute(f"SELECT * FROM runs WHERE {cond} ORDER BY {order}", args).fetchall():
            row = dict(r)
            problem = run_problem(row)
            if problem:
                self._skip("runs", row, problem)
                continue
            problem = baseline_problem(row)
            if problem:  # the run is usable without it: its trials stand on their own
                self.warn(f"tuning database {self.path}: runs row {row['id']}: {problem}; read as no baseline")
                row["baseline"] = None
            out.append(row)
        return out

    def _trials(self, cond: str = "1", args: tuple[Any, ...] = (), order: str = "id") -> list[dict[str, Any]]:
        """Trials that are well-formed and belong to a run; the others are named in a warning."""
        out = []
        for r in self.conn.execute(f"SELECT * FROM trials WHERE NOT ({ORPHANS}) AND ({cond}) ORDER BY {order}",
                                   args).fetchall():
            row = dict(r)
            problem = trial_problem(row)
            if problem:
                self._skip("trials", row, problem)
                continue
            out.append(row)
        return out

    def _skip(self, table: str, row: dict[str, Any], problem: str) -> None:
        entry = {"table": table, "id": row.get("id"), "problem": problem}
        if entry not in self.skipped:
            self.skipped.append(entry)
        self.warn(f"tuning database {self.path}: {table} row {row.get('id')!r} skipped: {problem}")

    def orphans(self) -> int:
        """How many trials belong to no run (never read: they have no environment to trust)."""
        return int(self.conn.execute(f"SELECT COUNT(*) FROM trials WHERE {ORPHANS}").fetchone()[0])

    def run(self, run_id: int) -> dict[str, Any] | None:
        rows = self._runs("id = ?", (run_id,))
        return rows[0] if rows else None

    def latest_run(self, key: str, states: tuple[str, ...] | None = None) -> dict[str, Any] | None:
        for r in self._runs("key = ?", (key,), order="id DESC"):
            if states is None or r["state"] in states:
                return r
        return None

    def trials(self, key: str | None = None, run_id: int | None = None) -> list[dict[str, Any]]:
        if run_id is not None:
            return self._trials("run_id = ?", (run_id,))
        if key is not None:
            return self._trials("key = ?", (key,))
        return self._trials()

    def ranked(self, key: str) -> Iterator[dict[str, Any]]:
        """The verified trials under ``key``, fastest first (verified: status ok means the output matched
        the reference); a caller that cannot use one takes the next."""
        rows = self._trials("key = ? AND status = 'ok' AND p50_ms IS NOT NULL", (key,))
        yield from sorted(rows, key=lambda r: r["p50_ms"])

    def best(self, key: str) -> dict[str, Any] | None:
        """The fastest verified trial under ``key``."""
        return next(self.ranked(key), None)

    def keys(self) -> list[dict[str, Any]]:
        """One row per tuning key: what it is, how many runs and trials, and its best time."""
        by_key: dict[str, dict[str, Any]] = {}
        for r in self._runs():
            k = by_key.setdefault(r["key"], {
                "key": r["key"], "op_signature": r["op_signature"], "variant": r["variant"], "backend": r["backend"],
                "fingerprint": r["fingerprint"], "runs": 0, "last_started": r["started"], "trials": 0, "ok": 0,
                "best_ms": None, "best_name": None})
            k["runs"] += 1
            k["last_started"] = max(k["last_started"], r["started"])
        for t in self._trials():
            k = by_key.get(t["key"])
            if k is None:
                continue
            k["trials"] += 1
            if t["status"] == "ok" and t["p50_ms"] is not None:
                k["ok"] += 1
                if k["best_ms"] is None or t["p50_ms"] < k["best_ms"]:
                    k["best_ms"], k["best_name"] = t["p50_ms"], t["name"]
        return sorted(by_key.values(), key=lambda k: k["last_started"], reverse=True)

    def find_keys(self, prefix: str) -> list[str]:
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self.conn.execute("SELECT DISTINCT key FROM runs WHERE key LIKE ? ESCAPE '\\'",
                                 (escaped + "%",)).fetchall()
        return [r[0] for r in rows if isinstance(r[0], str)]

    def export(self, key: str | None = None) -> dict[str, Any]:
        cond, args = ("key = ?", (key,)) if key else ("1", ())
        runs = self._runs(cond, args)
        trials = self._trials(cond, args)
        for r in runs:
            for k in ("op", "environment", "options", "baseline"):
                if r.get(k):
                    r[k] = json.loads(r[k])
        for t in trials:
            t["schedule"] = json.loads(t["schedule"])
            t.pop("schedule_key", None)
        return {"schema_version": SCHEMA_VERSION, "database": str(self.path), "exported": now_iso(),
                "runs": runs, "trials": trials, "skipped": list(self.skipped)}
