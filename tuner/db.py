"""The tuning database: SQLite in WAL mode, every trial kept.

Trials are keyed by the op signature, the variant and the environment fingerprint (backend, device and
architecture, driver, compiler and NVRTC versions, CPU flags, Tracea version: doctor/fingerprint.py), so
a change in any part is a miss, never a stale hit. Each trial is one short transaction committed before
the next candidate starts: a process killed at any point loses at most the trial in flight. Several
processes share the file (WAL readers never block the writer; writers wait up to ``BUSY_TIMEOUT_S``).

Location: ``$TRACEA_HOME/tuning.sqlite``, else ``platformdirs.user_data_dir("tracea")/tuning.sqlite``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError

from .recorded import schedule_key
from .trial import Trial, now_iso

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL, op_signature TEXT NOT NULL, op TEXT NOT NULL, variant TEXT NOT NULL,
    backend TEXT NOT NULL, fingerprint TEXT NOT NULL, environment TEXT NOT NULL,
    strategy TEXT NOT NULL, seed INTEGER NOT NULL, budget INTEGER, space_size INTEGER NOT NULL,
    options TEXT NOT NULL, baseline TEXT, state TEXT NOT NULL, started TEXT NOT NULL, finished TEXT);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id), key TEXT NOT NULL,
    idx INTEGER NOT NULL, schedule_key TEXT NOT NULL, name TEXT NOT NULL, schedule TEXT NOT NULL,
    status TEXT NOT NULL, p50_ms REAL, p95_ms REAL, min_ms REAL, runs INTEGER, rel_err REAL,
    error TEXT, compile_s REAL, seconds REAL, created TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS trials_by_key ON trials (key, status, p50_ms);
CREATE INDEX IF NOT EXISTS trials_by_run ON trials (run_id);
CREATE INDEX IF NOT EXISTS runs_by_key ON runs (key, id);
"""


def default_path() -> Path:
    from tracea.doctor.home import tracea_dir  # $TRACEA_HOME, checked, else the user data folder

    return tracea_dir("data") / "tuning.sqlite"


def tuning_key(op_signature: str, variant: str, fingerprint: str) -> str:
    return hashlib.sha256(f"{op_signature}|{variant}|{fingerprint}".encode()).hexdigest()[:20]


class TuningDB:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                        check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = FULL")
            self.conn.executescript(SCHEMA)  # idempotent; executescript commits on its own
            with self.tx():
                self.conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"tuning database {self.path}: {exc}",
                                "move the file aside (or set TRACEA_HOME) to start a new database") from None
        except OSError as exc:
            raise BadInputError(f"cannot open the tuning database {self.path}: {exc.strerror or exc}") from None
        version = self.conn.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0]
        if int(version) != SCHEMA_VERSION:
            raise BadInputError(f"tuning database {self.path} has schema version {version}; this Tracea reads "
                                f"{SCHEMA_VERSION}")

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction (BEGIN IMMEDIATE: take the write lock up front, wait if busy)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()

    # -------------------------------------------------------------------------------------- writing

    def start_run(self, *, key: str, op: Any, variant: str, backend: str, fingerprint: str,
                  environment: dict[str, Any], strategy: str, seed: int, budget: int | None, space_size: int,
                  options: dict[str, Any]) -> int:
        with self.tx() as c:
            cur = c.execute(
                "INSERT INTO runs (key, op_signature, op, variant, backend, fingerprint, environment, strategy, seed,"
                " budget, space_size, options, state, started) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (key, op.signature, json.dumps(op.to_json()), variant, backend, fingerprint,
                 json.dumps(environment, default=str), strategy, seed, budget, space_size, json.dumps(options),
                 "running", now_iso()))
            return int(cur.lastrowid)  # type: ignore[arg-type]

    def add_trial(self, run_id: int, key: str, trial: Trial) -> None:
        m = trial.measurement
        with self.tx() as c:
            c.execute(
                "INSERT INTO trials (run_id, key, idx, schedule_key, name, schedule, status, p50_ms, p95_ms, min_ms,"
                " runs, rel_err, error, compile_s, seconds, created) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, key, trial.index, schedule_key(trial.schedule), trial.name, json.dumps(trial.schedule),
                 m.status, m.p50_ms, m.p95_ms, m.min_ms, m.runs, m.rel_err, m.error, m.compile_s, trial.seconds,
                 trial.timestamp))

    def set_baseline(self, run_id: int, baseline: dict[str, Any] | None) -> None:
        with self.tx() as c:
            c.execute("UPDATE runs SET baseline = ? WHERE id = ?", (json.dumps(baseline), run_id))

    def finish_run(self, run_id: int, state: str) -> None:
        with self.tx() as c:
            c.execute("UPDATE runs SET state = ?, finished = ? WHERE id = ?", (state, now_iso(), run_id))

    def clear(self, key: str | None = None) -> int:
        """Delete every run and trial (of ``key``); the number of trials removed."""
        with self.tx() as c:
            where, args = ("WHERE key = ?", (key,)) if key else ("", ())
            n = c.execute(f"SELECT COUNT(*) FROM trials {where}", args).fetchone()[0]
            c.execute(f"DELETE FROM trials {where}", args)
            c.execute(f"DELETE FROM runs {where}", args)
        return int(n)

    # -------------------------------------------------------------------------------------- reading

    def run(self, run_id: int) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return dict(row) if row else None

    def latest_run(self, key: str, states: tuple[str, ...] | None = None) -> dict[str, Any] | None:
        rows = self.conn.execute("SELECT * FROM runs WHERE key = ? ORDER BY id DESC", (key,)).fetchall()
        for r in rows:
            if states is None or r["state"] in states:
                return dict(r)
        return None

    def trials(self, key: str | None = None, run_id: int | None = None) -> list[dict[str, Any]]:
        if run_id is not None:
            rows = self.conn.execute("SELECT * FROM trials WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
        elif key is not None:
            rows = self.conn.execute("SELECT * FROM trials WHERE key = ? ORDER BY id", (key,)).fetchall()
        else:
            rows = self.conn.execute("SELECT * FROM trials ORDER BY id").fetchall()
        return [dict(r) for r in rows]

    def best(self, key: str) -> dict[str, Any] | None:
        """The fastest verified trial under ``key`` (verified: status ok means the output matched the reference)."""
        row = self.conn.execute(
            "SELECT * FROM trials WHERE key = ? AND status = 'ok' AND p50_ms IS NOT NULL ORDER BY p50_ms LIMIT 1",
            (key,)).fetchone()
        return dict(row) if row else None

    def keys(self) -> list[dict[str, Any]]:
        """One row per tuning key: what it is, how many runs and trials, and its best time."""
        rows = self.conn.execute("""
            SELECT r.key, r.op_signature, r.variant, r.backend, r.fingerprint, COUNT(DISTINCT r.id) AS runs,
                   MAX(r.started) AS last_started,
                   (SELECT COUNT(*) FROM trials t WHERE t.key = r.key) AS trials,
                   (SELECT COUNT(*) FROM trials t WHERE t.key = r.key AND t.status = 'ok') AS ok,
                   (SELECT MIN(p50_ms) FROM trials t WHERE t.key = r.key AND t.status = 'ok') AS best_ms,
                   (SELECT name FROM trials t WHERE t.key = r.key AND t.status = 'ok'
                     ORDER BY p50_ms LIMIT 1) AS best_name
            FROM runs r GROUP BY r.key ORDER BY last_started DESC""").fetchall()
        return [dict(r) for r in rows]

    def find_keys(self, prefix: str) -> list[str]:
        rows = self.conn.execute("SELECT DISTINCT key FROM runs WHERE key LIKE ?", (prefix + "%",)).fetchall()
        return [r[0] for r in rows]

    def export(self, key: str | None = None) -> dict[str, Any]:
        where, args = ("WHERE key = ?", (key,)) if key else ("", ())
        runs = [dict(r) for r in self.conn.execute(f"SELECT * FROM runs {where} ORDER BY id", args)]
        trials = [dict(r) for r in self.conn.execute(f"SELECT * FROM trials {where} ORDER BY id", args)]
        for r in runs:
            for k in ("op", "environment", "options", "baseline"):
                if r.get(k):
                    r[k] = json.loads(r[k])
        for t in trials:
            t["schedule"] = json.loads(t["schedule"])
            t.pop("schedule_key", None)
        return {"schema_version": SCHEMA_VERSION, "database": str(self.path), "exported": now_iso(),
                "runs": runs, "trials": trials}
