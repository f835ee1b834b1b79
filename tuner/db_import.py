"""``tracea cache import FILE``: another database's export (``tracea cache export``; another machine's,
so untrusted) merged into this one by key, in one transaction.

Every run and trial is checked as a row read from the database is (tuner/db_rows.py), and more: a run's key
must be the hash of its own op signature, variant and fingerprint (a key that does not match would file
trials under another op or machine), and each trial must belong to a run of the file with the same key.
One bad row refuses the whole file, naming the row; nothing is written. A run already here (same key,
fingerprint, start time, strategy, seed, budget and options) and a trial of that run already here (same
index, schedule, status and time) are not added twice, so importing the same file again adds nothing; two
runs started in the same second (timestamps are to the second) stay two, each with all its trials. An imported run still "running" elsewhere arrives
"interrupted": nothing here will finish it. Nothing in the file is executed; schedules are data, used only
after the variant's own validation (tuner/lookup.py).
"""

from __future__ import annotations

import json
from typing import Any

from tracea.doctor.errors import BadInputError

from .db import SCHEMA_VERSION, TuningDB, tuning_key
from .db_rows import baseline_problem, run_problem, trial_problem
from .recorded import schedule_key

RUN_COLS = ("key", "op_signature", "op", "variant", "backend", "fingerprint", "environment", "strategy", "seed",
            "budget", "space_size", "options", "baseline", "state", "started", "finished")
TRIAL_COLS = ("key", "idx", "schedule_key", "name", "schedule", "status", "p50_ms", "p95_ms", "min_ms", "runs",
              "rel_err", "error", "compile_s", "seconds", "created")


def _run_row(i: int, r: Any) -> dict[str, Any]:
    if not isinstance(r, dict):
        raise BadInputError(f"runs[{i}]: expected an object, got {type(r).__name__}")
    row = dict(r)
    for k in ("op", "environment", "options", "baseline"):  # the export's objects, back to the stored text
        if k in row and not isinstance(row[k], str) and row[k] is not None:
            row[k] = json.dumps(row[k])
    problem = run_problem(row) or baseline_problem(row)
    if problem is None and row["key"] != tuning_key(row["op_signature"], row["variant"], row["fingerprint"]):
        problem = "key is not the hash of its op signature, variant and fingerprint"
    if problem:
        raise BadInputError(f"runs[{i}] (id {row.get('id')!r}): {problem}")
    return row


def _trial_row(i: int, t: Any, runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(t, dict):
        raise BadInputError(f"trials[{i}]: expected an object, got {type(t).__name__}")
    row = dict(t)
    sched = row.get("schedule")
    if isinstance(sched, dict):
        row["schedule"] = json.dumps(sched)
        row["schedule_key"] = schedule_key(sched)
    problem = trial_problem(row)
    if problem is None:
        run = runs.get(row["run_id"])
        if run is None:
            problem = f"run_id {row['run_id']} is not a run of this file"
        elif run["key"] != row["key"]:
            problem = "its key is not its run's"
    if problem:
        raise BadInputError(f"trials[{i}] (id {row.get('id')!r}): {problem}")
    return row


def check(doc: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The export's runs and trials as database rows, every one checked; BadInputError naming the first bad."""
    if not isinstance(doc, dict):
        raise BadInputError(f"import: expected an export object, got {type(doc).__name__}",
                            "the file `tracea cache export --out FILE` writes")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise BadInputError(f"import: schema_version {doc.get('schema_version')!r}; this Tracea reads {SCHEMA_VERSION}")
    if not isinstance(doc.get("runs"), list) or not isinstance(doc.get("trials"), list):
        raise BadInputError("import: the export needs a list of runs and a list of trials")
    runs = [_run_row(i, r) for i, r in enumerate(doc["runs"])]
    by_id = {r["id"]: r for r in runs}
    if len(by_id) != len(runs):
        raise BadInputError("import: two runs have the same id")
    trials = [_trial_row(i, t, by_id) for i, t in enumerate(doc["trials"])]
    return runs, trials


def merge(db: TuningDB, doc: Any) -> dict[str, int]:
    """Add ``doc``'s runs and trials to ``db`` (see the module docstring); counts of what was added and known."""
    runs, trials = check(doc)
    out = {"runs_added": 0, "runs_known": 0, "trials_added": 0, "trials_known": 0}
    with db.tx() as c:
        new_id: dict[int, int] = {}
        for r in runs:
            # one run: its key and machine, when it started (to the second) and how it searched; two runs of one
            # machine started in the same second (two processes, a replayed space) stay two runs
            found = c.execute("SELECT id FROM runs WHERE key = ? AND fingerprint = ? AND started = ? AND strategy IS ?"
                              " AND seed IS ? AND budget IS ? AND options IS ?",
                              (r["key"], r["fingerprint"], r["started"], r.get("strategy"), r.get("seed"),
                               r.get("budget"), r.get("options"))).fetchone()
            if found is not None:
                new_id[r["id"]] = int(found[0])
                out["runs_known"] += 1
                continue
            vals = {**{k: r.get(k) for k in RUN_COLS}, "state": "interrupted" if r["state"] == "running" else r["state"]}
            cur = c.execute(f"INSERT INTO runs ({', '.join(RUN_COLS)}) VALUES ({', '.join('?' * len(RUN_COLS))})",
                            [vals[k] for k in RUN_COLS])
            new_id[r["id"]] = int(cur.lastrowid)  # type: ignore[arg-type]
            out["runs_added"] += 1
        for t in trials:
            if c.execute("SELECT 1 FROM trials WHERE run_id = ? AND idx IS ? AND schedule_key = ? AND status = ?"
                         " AND created = ?", (new_id[t["run_id"]], t.get("idx"), t["schedule_key"], t["status"],
                                              t["created"])).fetchone() is not None:  # this run's own trial again
                out["trials_known"] += 1
                continue
            c.execute(f"INSERT INTO trials (run_id, {', '.join(TRIAL_COLS)}) VALUES ({', '.join('?' * (1 + len(TRIAL_COLS)))})",
                      [new_id[t["run_id"]], *(t.get(k) for k in TRIAL_COLS)])
            out["trials_added"] += 1
    return out
