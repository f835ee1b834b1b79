"""`tracea cache import FILE` (issue 20): another machine's export merged by key into this database, every row
checked first (one bad row refuses the file, nothing written), nothing added twice, and the merged best is
what `tracea cache list` and the tuner's lookup then see."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracea.doctor.errors import BadInputError
from tracea.tuner.db import TuningDB
from tracea.tuner.db_import import merge
from tracea.tuner.run import SearchLimits, Target, TuneConfig, tune

SPACE = Path(__file__).parents[1] / "fixtures" / "spaces" / "cpu_gemm_512_avx512.json"


def _export(tmp_path: Path, name: str, seed: int, budget: int = 6) -> dict:
    """A real database of a replayed tune (its own file), exported."""
    db_path = tmp_path / f"{name}.sqlite"
    cfg = TuneConfig(Target(simulate=str(SPACE)), limits=SearchLimits(strategy="random", budget=budget, seed=seed))
    from tracea.tuner.config import Outputs

    tune(None, None, TuneConfig(cfg.target, limits=cfg.limits, outputs=Outputs(db_path=str(db_path))))
    db = TuningDB.reader(db_path)
    try:
        return db.export()
    finally:
        db.close()


def test_two_machines_merge_by_key_and_nothing_twice(tmp_path):
    a, b = _export(tmp_path, "a", 1), _export(tmp_path, "b", 2)
    # the two runs started in the same second and measured in it (timestamps are to the second): still two runs
    # of six measurements each, one of them possibly of a schedule the other measured too
    for r in b["runs"]:
        r["started"] = a["runs"][0]["started"]
    for t, u in zip(b["trials"], a["trials"], strict=True):
        t["created"] = u["created"]
    b["trials"][0]["schedule"], b["trials"][0]["name"] = a["trials"][0]["schedule"], a["trials"][0]["name"]
    db = TuningDB(tmp_path / "here.sqlite")
    try:
        first = merge(db, a)
        assert first == {"runs_added": 1, "runs_known": 0, "trials_added": 6, "trials_known": 0}
        again = merge(db, a)
        assert again == {"runs_added": 0, "runs_known": 1, "trials_added": 0, "trials_known": 6}
        assert merge(db, b) == {"runs_added": 1, "runs_known": 0, "trials_added": 6, "trials_known": 0}
        key = a["runs"][0]["key"]
        assert b["runs"][0]["key"] == key  # the same op, variant and (replay) fingerprint
        trials = db.trials(key)
        # each machine's measurement once: the two tunes may both have measured one schedule (random draws), and
        # both measurements are kept; a row is the same only with the same schedule, status and time
        assert len(trials) == 12 and len({t["run_id"] for t in trials}) == 2
        rows = [(t["run_id"], t["idx"], t["schedule_key"], t["created"]) for t in trials]
        assert len(set(rows)) == 12
        assert len({t["schedule_key"] for t in trials}) < 12  # one schedule measured by both runs, kept twice
        best = min((t for t in a["trials"] + b["trials"] if t["status"] == "ok"), key=lambda t: t["p50_ms"])
        assert db.best(key)["p50_ms"] == best["p50_ms"]
    finally:
        db.close()


def _bad(doc: dict, where: str, field: str, value) -> dict:
    d = copy.deepcopy(doc)
    d[where][0][field] = value
    return d


@pytest.mark.parametrize("change,message", [
    (lambda d: _bad(d, "runs", "key", "0" * 20), "key is not the hash"),
    (lambda d: _bad(d, "runs", "state", "exploded"), "state"),
    (lambda d: _bad(d, "trials", "status", "great"), "status"),
    (lambda d: _bad(d, "trials", "p50_ms", -1.0), "p50_ms"),
    (lambda d: _bad(d, "trials", "run_id", 999), "not a run of this file"),
    (lambda d: _bad(d, "trials", "schedule", "rm -rf /"), "schedule"),
    (lambda d: {**d, "schema_version": 99}, "schema_version"),
    (lambda d: {**d, "runs": "all"}, "list of runs"),
    (lambda d: [d], "export object"),
])
def test_one_bad_row_refuses_the_file_and_writes_nothing(tmp_path, change, message):
    doc = _export(tmp_path, "a", 1, budget=3)
    db = TuningDB(tmp_path / "here.sqlite")
    try:
        with pytest.raises(BadInputError, match=message):
            merge(db, change(doc))
        assert db.keys() == [] and db.trials() == []
    finally:
        db.close()


def test_a_running_run_arrives_interrupted(tmp_path):
    doc = _bad(_export(tmp_path, "a", 1, budget=3), "runs", "state", "running")
    db = TuningDB(tmp_path / "here.sqlite")
    try:
        merge(db, doc)
        assert db.latest_run(doc["runs"][0]["key"])["state"] == "interrupted"
    finally:
        db.close()


def test_the_command_line_round_trip(tmp_path):
    doc = _export(tmp_path, "a", 1, budget=4)
    f = tmp_path / "export.json"
    f.write_text(json.dumps(doc))
    env = {**os.environ, "TRACEA_HOME": str(tmp_path / "home")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "tracea", "cache", *args], capture_output=True, text=True,
                              env=env, timeout=120)

    out = run("import", str(f), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"runs_added": 1, "runs_known": 0, "trials_added": 4, "trials_known": 0}
    assert "imported 0 trials of 0 runs" in run("import", str(f)).stdout
    listed = run("list")
    assert listed.returncode == 0 and doc["runs"][0]["key"][:8] in listed.stdout
    (tmp_path / "bad.json").write_text("{not json")
    bad = run("import", str(tmp_path / "bad.json"))
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr
