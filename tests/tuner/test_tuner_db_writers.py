"""A tune's writes never go where they should not (issue 14): a run cleared (``cache clear``, while a real
tune runs, or of another key) is never written again, a database file deleted, replaced or restored from a
backup under a running tune is noticed at the next write and left as the user made it, and a database an older
Tracea left in WAL mode is taken over whole. Real ``tracea`` subprocesses, real gcc, real SQLite; after every
case the file passes ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tuner_db_checks import TUNE, assert_clean, count_trials, manifest_status, start, tracea, wait_for_trials
from tuner_db_checks import home as home  # a fixture (pytest finds it here by name)

from tracea.kernels import Gemm
from tracea.tuner.db import DatabaseChangedError, TuningDB
from tracea.tuner.trial import Measurement, Trial


def _trial(i: int, ms: float = 1.0) -> Trial:
    sched = {"schema_version": 1, "backend": "cpu", "mr": 4, "nr": 4, "mc": 8 * (i + 1), "kc": 64, "nc": 64,
             "threads": 1, "unroll": 1, "prefetch": 0, "pack_a": True, "pack_b": True}
    return Trial(i, sched, f"cand{i}", Measurement("ok", p50_ms=ms, p95_ms=ms), 0.1)


def _start_run(db: TuningDB, key: str = "k") -> int:
    return db.start_run(key=key, op=Gemm(m=64, n=64, k=64), variant="cpu-portable.gemm", backend="cpu",
                        fingerprint="f", environment={}, strategy="random", seed=0, budget=10, space_size=10,
                        options={})


def test_foreign_keys_are_enforced(tmp_path) -> None:
    db = TuningDB(tmp_path / "t.sqlite")
    assert db.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        db.conn.execute("INSERT INTO trials (run_id, key, idx, schedule_key, name, schedule, status, created) "
                        "VALUES (99, 'k', 0, '{}', 'x', '{}', 'ok', 'now')")
    assert_clean(tmp_path / "t.sqlite")


def test_a_cleared_run_is_never_written_again(tmp_path) -> None:
    path = tmp_path / "t.sqlite"
    tuner, other = TuningDB(path), TuningDB(path)
    run = _start_run(tuner)
    tuner.add_trial(run, "k", _trial(0))
    assert other.clear() == 1
    for write in (lambda: tuner.add_trial(run, "k", _trial(1)), lambda: tuner.set_baseline(run, None),
                  lambda: tuner.finish_run(run, "done")):
        with pytest.raises(DatabaseChangedError, match=f"run {run} was removed"):
            write()
    assert other.trials() == [] and other.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
    assert_clean(path)


def test_a_replaced_or_deleted_file_is_noticed_at_the_next_write(tmp_path) -> None:
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    run = _start_run(db)
    TuningDB(tmp_path / "other.sqlite").close()
    os.replace(tmp_path / "other.sqlite", path)
    with pytest.raises(DatabaseChangedError, match="replaced by another file"):
        db.add_trial(run, "k", _trial(0))
    assert TuningDB.reader(path).trials() == []  # nothing went into the new file
    os.unlink(path)
    with pytest.raises(DatabaseChangedError, match="was deleted"):
        db.add_trial(run, "k", _trial(0))
    assert not path.exists()  # and it was not brought back


def test_cache_clear_while_tuning_stops_the_tune_and_leaves_no_orphans(home) -> None:
    db_path = home / "tuning.sqlite"
    proc = start(*TUNE, "--budget", "40", "--patience", "0")
    wait_for_trials(db_path, proc, 2)
    cleared = tracea("cache", "clear", "--all")
    assert cleared.returncode == 0 and cleared.stdout.startswith("cleared "), cleared.stderr
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "was removed from the tuning database" in err and "cache clear" in err
    trials_file = Path(err.split("kept in ", 1)[1].split(",", 1)[0].strip())
    assert trials_file.name == "trials.jsonl" and len(trials_file.read_text().splitlines()) >= 2
    assert count_trials(db_path) == 0  # no trial of a run that is gone
    assert "nothing tuned yet" in tracea("cache", "list").stdout
    assert manifest_status(home) == ["error"]
    assert_clean(db_path)


def test_a_database_deleted_mid_tune_is_said_with_a_non_zero_exit(home) -> None:
    db_path = home / "tuning.sqlite"
    proc = start(*TUNE, "--budget", "40", "--patience", "0")
    wait_for_trials(db_path, proc, 2)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert f"the tuning database {db_path} was deleted" in err
    trials_file = Path(err.split("kept in ", 1)[1].split(",", 1)[0].strip())
    assert len(trials_file.read_text().splitlines()) >= 2  # the run folder kept what was measured
    assert not db_path.exists()  # the tune did not write a new file behind the user's back


def _backup_with_trials(home: Path) -> tuple[Path, tuple[int, int]]:
    """A real tune's database copied aside (a user's backup): its path and its (runs, trials)."""
    done = tracea(*TUNE, "--budget", "3")
    assert done.returncode == 0, done.stderr
    db_path = home / "tuning.sqlite"
    backup = home.parent / "backup.sqlite"
    shutil.copy2(db_path, backup)
    return backup, _counts(backup)


def _counts(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return (conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("how", ["mv", "cp"])
def test_a_backup_restored_under_a_running_tune_stays_as_restored(home, how) -> None:
    """`mv backup tuning.sqlite` (a new file at the path) and `cp backup tuning.sqlite` (the same file
    rewritten in place) while a tune runs: the tune stops with a non-zero exit naming what happened and
    where its trials are kept; the restored database is the backup, whole (its runs and trials, integrity
    and foreign keys), with no journal or log of the tune's beside it; readers and the next tune use it.
    Before, the tune's write-ahead log was replayed into the restored file (malformed for good), or the
    tune wrote on into it and the backup's runs were lost without a word."""
    backup, restored = _backup_with_trials(home)
    db_path = home / "tuning.sqlite"
    for attempt in range(2):  # the damage was a race: twice, at different moments of the tune
        proc = start(*TUNE, "--budget", "60", "--patience", "0", "--retune")
        wait_for_trials(db_path, proc, restored[1] + 1 + attempt)
        if how == "mv":
            staged = home / "staged.sqlite"
            shutil.copy2(backup, staged)
            os.replace(staged, db_path)
        else:
            shutil.copyfile(backup, db_path)  # truncate and rewrite the same inode
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 1, err
        said = "replaced by another file" if how == "mv" else "overwritten with an older copy of itself"
        assert said in err and "nothing is written to" in err, err
        assert "kept in" in err and "Traceback" not in err, err
        assert _counts(db_path) == restored
        assert sorted(p.name for p in home.iterdir() if p.name.startswith("tuning.sqlite")) == ["tuning.sqlite"]
        assert_clean(db_path)
        listed = tracea("cache", "list", "--json")
        assert listed.returncode == 0 and "malformed" not in listed.stderr, listed.stderr
    again = tracea(*TUNE, "--budget", "2", "--retune")  # the restored file is a working database
    assert again.returncode == 0, again.stderr
    assert _counts(db_path)[0] == restored[0] + 1
    assert_clean(db_path)


def test_a_database_of_an_older_tracea_in_wal_mode_is_taken_over(tmp_path) -> None:
    """A database an older Tracea left in WAL mode, its last write still only in the -wal file (the process
    ended without closing it): the next write of this Tracea turns it into a rollback-journal database
    holding that write too, and no -wal or -shm file is left beside it."""
    path = tmp_path / "t.sqlite"
    db = TuningDB(path)
    run = _start_run(db)
    db.add_trial(run, "k", _trial(0))
    db.close()
    older = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode = WAL'); "
             "c.execute('PRAGMA wal_autocheckpoint = 0'); "
             "c.execute(\"UPDATE trials SET name = 'kept-in-the-log' WHERE id = 1\"); c.commit(); os._exit(0)")
    subprocess.run([sys.executable, "-c", older, str(path)], check=True, timeout=60)
    assert Path(f"{path}-wal").stat().st_size > 0
    db = TuningDB(path)
    db.add_trial(run, "k", _trial(1))
    assert [t["name"] for t in db.trials()] == ["kept-in-the-log", "cand1"]
    db.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.sqlite"]
    assert_clean(path)


def test_clearing_another_key_does_not_stop_a_tune(tmp_path) -> None:
    path = tmp_path / "t.sqlite"
    tuner, other = TuningDB(path), TuningDB(path)
    mine, theirs = _start_run(tuner, "mine"), _start_run(other, "theirs")
    other.add_trial(theirs, "theirs", _trial(0))
    assert other.clear("theirs") == 1
    tuner.add_trial(mine, "mine", _trial(1))
    tuner.finish_run(mine, "done")
    assert [t["name"] for t in other.trials()] == ["cand1"] and other.run(mine)["state"] == "done"
    assert_clean(path)
