"""What reads the tuning database when it cannot write it or cannot read all of it (issue 14): a read-only
database (or one in a read-only folder) is listed, shown, exported and used by bench, and a tune says it is
read-only; a missing one reads as empty and is not created; a malformed row or run is skipped with a warning
naming it, trials of no run are never used, a stored schedule this Tracea refuses is skipped, and a
non-integer schema version is a damaged database. Real ``tracea`` subprocesses on a copy of one real tune's
home; after every case the file passes ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tuner_db_checks import TUNE, assert_clean, tracea
from tuner_db_checks import home as home  # fixtures (pytest finds them here by name)
from tuner_db_checks import tuned as tuned
from tuner_db_checks import tuned_home as tuned_home

from tracea.kernels import Gemm
from tracea.tuner.db import TuningDB


def _sql(db_path: Path, statement: str, args: tuple = ()) -> None:
    conn = sqlite3.connect(db_path)  # foreign keys off, as any other tool would write
    conn.execute(statement, args)
    conn.commit()
    conn.close()


# --------------------------------------------------------------------------------------- read-only


def _bound_by_file_modes(scratch: Path) -> list[str] | None:
    """A prefix under which a command is bound by file modes, or None where none can be had.

    Root ignores file modes through two capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH). Dropped from
    the bounding and inheritable sets, a root process stays root, so it reads the checkout and the virtual
    environment wherever they are and whatever their modes (another user could not reach a private
    checkout), but it can no longer write a 0444 file or into a 0555 folder. The drop is checked on a
    scratch file before a test relies on it."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    caps = "-dac_override,-dac_read_search"
    prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]
    probe = scratch / "mode-probe"
    probe.write_text("")
    probe.chmod(0o444)
    try:
        done = subprocess.run([*prefix, sys.executable, "-c", f"open({str(probe)!r}, 'a')"], capture_output=True,
                              text=True, timeout=60)
    except OSError:
        return None
    finally:
        probe.unlink()
    return prefix if done.returncode != 0 and "PermissionError" in done.stderr else None


def _readonly_env(home: Path) -> dict[str, str]:
    return {**os.environ, "TRACEA_HOME": str(home)}


NO_MODES = "running as root where capabilities cannot be dropped (setpriv): file modes cannot make a file read-only"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_read_only_database_is_listed_shown_exported_and_used_by_bench(tuned_home) -> None:
    prefix = _bound_by_file_modes(tuned_home.parent)
    if prefix is None:
        pytest.skip(NO_MODES)
    db_path = tuned_home / "tuning.sqlite"
    best = TuningDB.reader(db_path).keys()[0]
    db_path.chmod(0o444)
    before = _digest(db_path)
    env = _readonly_env(tuned_home)
    listed = tracea("cache", "list", "--json", env=env, prefix=prefix)
    assert listed.returncode == 0, listed.stderr
    assert [k["key"] for k in json.loads(listed.stdout)["keys"]] == [best["key"]]
    shown = tracea("cache", "show", best["key"][:8], env=env, prefix=prefix)
    assert shown.returncode == 0 and best["best_name"] in shown.stdout, shown.stderr
    exported = tracea("cache", "export", env=env, prefix=prefix)
    assert exported.returncode == 0 and len(json.loads(exported.stdout)["trials"]) == 3, exported.stderr
    bench = tracea("bench", "gemm", "--m", "64", "--repeat", "2", "--json", env=env, prefix=prefix)
    assert bench.returncode == 0, bench.stderr
    row = json.loads(bench.stdout.splitlines()[0])
    stored = TuningDB.reader(db_path).best(best["key"])
    assert row["schedule"] == json.loads(stored["schedule"])  # the tuned schedule, read-only
    # tuning needs to write: a clear read-only message, not "move a good database aside"
    tune = tracea(*TUNE, "--budget", "1", "--retune", env=env, prefix=prefix)
    assert tune.returncode == 2 and "is read-only" in tune.stderr and "move the file aside" not in tune.stderr
    assert _digest(db_path) == before
    assert_clean(db_path)


def test_a_database_in_a_read_only_folder_is_read_as_immutable(tuned_home, monkeypatch) -> None:
    """Nothing can be written beside it (not even the -shm file a WAL reader needs): read it through
    ``immutable=1``. As root the folder's mode does not stop writes, so the check that decides is made
    to answer "not writable"; then a command bound by file modes reads the real folder (the CLI case below)."""
    db_path = tuned_home / "tuning.sqlite"
    before = _digest(db_path)
    import tracea.tuner.db as dbmod

    monkeypatch.setattr(dbmod, "_writable", lambda path: False)
    db = TuningDB.reader(db_path)
    assert db.immutable and len(db.trials()) == 3 and db.keys()[0]["ok"] == 3
    db.close()
    assert _digest(db_path) == before and not Path(f"{db_path}-shm").exists()

    monkeypatch.undo()
    prefix = _bound_by_file_modes(tuned_home.parent)
    if prefix is None:
        pytest.skip(NO_MODES)
    db_path.chmod(0o444)
    tuned_home.chmod(0o555)
    try:
        listed = tracea("cache", "list", env=_readonly_env(tuned_home), prefix=prefix)
        assert listed.returncode == 0 and "(read-only)" in listed.stdout, listed.stderr
    finally:
        tuned_home.chmod(0o755)
    assert _digest(db_path) == before
    assert_clean(db_path)


def test_a_missing_database_reads_as_empty_and_is_not_created(home) -> None:
    listed = tracea("cache", "list")
    assert listed.returncode == 0 and "nothing tuned yet" in listed.stdout
    assert tracea("cache", "export").returncode == 0
    assert not (home / "tuning.sqlite").exists()


# ------------------------------------------------------------------------------------ malformed rows

MALFORMED = {
    "bad schedule": ("UPDATE trials SET schedule = '{not json' WHERE id = 1", "trials row 1", "schedule is not valid JSON"),
    "p50_ms text": ("UPDATE trials SET p50_ms = 'fast' WHERE id = 2", "trials row 2", "p50_ms is 'fast', not a number"),
    "schema_version": ("UPDATE trials SET schedule = json_set(schedule, '$.schema_version', 'one') WHERE id = 3",
                       "trials row 3", "schedule.schema_version is 'one'"),
    "bad baseline": ("UPDATE runs SET baseline = '{\"name\": \"numpy\", \"p50_ms\": \"slow\"' WHERE id = 1",
                     "runs row 1", "baseline is not valid JSON"),
    "status": ("UPDATE trials SET status = 'great' WHERE id = 1", "trials row 1", "status is 'great'"),
    "negative time": ("UPDATE trials SET p50_ms = -1 WHERE id = 2", "trials row 2", "p50_ms is -1.0, not a positive time"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_row_is_skipped_with_a_warning_naming_it(tuned_home, case) -> None:
    statement, row, problem = MALFORMED[case]
    db_path = tuned_home / "tuning.sqlite"
    _sql(db_path, statement)
    key = TuningDB.reader(db_path, warn=lambda _: None).find_keys("")[0]
    for args in (["cache", "list"], ["cache", "show", key[:8]], ["cache", "show", key[:8], "--json"],
                 ["cache", "export"], [*TUNE, "--budget", "3"]):
        done = tracea(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert row in done.stderr and problem in done.stderr, (args, done.stderr)
        assert "internal error" not in done.stderr
    exported = json.loads(tracea("cache", "export").stdout)
    if row.startswith("trials"):
        assert exported["skipped"][0]["table"] == "trials" and len(exported["trials"]) == 2
    else:
        assert exported["runs"][0]["baseline"] is None and len(exported["trials"]) == 3
    assert_clean(db_path)


def test_a_malformed_run_hides_the_key_but_nothing_fails(tuned_home) -> None:
    db_path = tuned_home / "tuning.sqlite"
    _sql(db_path, "UPDATE runs SET seed = 'x' WHERE id = 1")
    listed = tracea("cache", "list")
    assert listed.returncode == 0 and "runs row 1 skipped: seed is 'x'" in listed.stderr
    key = TuningDB.reader(db_path, warn=lambda _: None).find_keys("")[0]
    shown = tracea("cache", "show", key[:8])
    assert shown.returncode == 2 and "every run of" in shown.stderr
    assert tracea("cache", "clear", key[:8]).stdout == "cleared 3 trials\n"
    assert_clean(db_path)


def test_a_non_integer_schema_version_is_a_damaged_database(tuned_home) -> None:
    _sql(tuned_home / "tuning.sqlite", "UPDATE meta SET value = 'one' WHERE name = 'schema_version'")
    for args in (["cache", "list"], ["cache", "export"], [*TUNE, "--budget", "1"]):
        done = tracea(*args)
        assert done.returncode == 2, done.stderr
        assert "schema_version is 'one', not a version number" in done.stderr
        assert "move the file aside" in done.stderr  # a genuinely damaged file keeps its hint


def test_trials_of_no_run_are_never_used_and_can_be_cleared(tuned_home) -> None:
    db_path = tuned_home / "tuning.sqlite"
    conn = sqlite3.connect(db_path)  # an older Tracea without foreign keys, racing a clear
    conn.execute("DELETE FROM runs")
    conn.commit()
    conn.close()
    db = TuningDB.reader(db_path)
    assert db.orphans() == 3 and db.trials() == [] and db.keys() == []
    key = db.conn.execute("SELECT key FROM trials LIMIT 1").fetchone()[0]
    assert db.best(key) is None  # bench does not take a trial nobody can see as "tuned"
    db.close()
    listed = tracea("cache", "list")
    assert "3 trials belong to no run" in listed.stdout and "nothing tuned yet" in listed.stdout
    assert tracea("cache", "clear", "--orphans").stdout == "cleared 3 trials of no run\n"
    assert_clean(db_path)


def _lookup_past_a_cheaper_row(tuned_home, schedule_of) -> tuple[object, dict, list[str]]:
    """A row other than the best given the schedule ``schedule_of(best's)`` (JSON text) and the lowest time, then
    the stored schedule for it: (what the lookup returned, the best row, the warnings it printed)."""
    from tracea.doctor import probe
    from tracea.tuner.lookup import stored_schedule

    db_path = tuned_home / "tuning.sqlite"
    db = TuningDB.reader(db_path)
    best, k = db.best(db.find_keys("")[0]), db.keys()[0]
    db.close()
    text = schedule_of(json.loads(best["schedule"]))
    _sql(db_path, "UPDATE trials SET schedule = ?, schedule_key = ?, p50_ms = 1e-6 WHERE id = ?",
         (text, json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")),
          [r for r in range(1, 4) if r != best["id"]][0]))
    warnings: list[str] = []
    import tracea.tuner.db as dbmod

    original = dbmod._stderr_warning
    dbmod._stderr_warning = warnings.append
    try:
        got = stored_schedule(Gemm(m=64, n=64, k=64), k["variant"], probe(), "cpu", str(db_path))
    finally:
        dbmod._stderr_warning = original
    return got, best, warnings


def test_bench_skips_a_stored_schedule_this_tracea_refuses(tuned_home) -> None:
    broken = json.dumps({"schema_version": 1, "backend": "cpu", "mr": 4})  # parses as JSON, not as a schedule
    got, best, warnings = _lookup_past_a_cheaper_row(tuned_home, lambda _best: broken)
    assert got == json.loads(best["schedule"])
    assert any("its schedule is refused" in w for w in warnings), warnings


def test_bench_skips_a_stored_schedule_refused_for_this_op_on_this_host(tuned_home) -> None:
    """A row that parses but that the backend's ``validate_schedule`` refuses here (more threads than this host's
    cores; on a GPU, split-K over three consumers since it was refused) is skipped like an unreadable one: the
    build would raise on it, uncaught by ``tracea bench``."""
    got, best, warnings = _lookup_past_a_cheaper_row(tuned_home, lambda b: json.dumps({**b, "threads": 4096}))
    assert got == json.loads(best["schedule"])
    assert any("threads: 4096" in w for w in warnings), warnings


def test_a_key_prefix_is_not_a_pattern(tuned_home) -> None:
    for prefix in ("%", "_"):
        done = tracea("cache", "show", prefix)
        assert done.returncode == 2 and "no tuning key starts with" in done.stderr
