"""The tuning database's tables: the SQL that creates them (``SCHEMA``: idempotent, run at every writable
open), its version, the tables a Tracea database must have, and the condition that finds a trial of no run
(``ORPHANS``)."""

SCHEMA_VERSION = 1

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
TABLES = ("meta", "runs", "trials")
ORPHANS = "run_id NOT IN (SELECT id FROM runs)"
