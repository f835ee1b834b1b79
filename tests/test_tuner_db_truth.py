"""The tuning database never disagrees with itself (issue 14): a ``cache clear`` or a deleted or replaced
file under a running tune, a read-only file, malformed rows, a damaged cached binary, and SIGTERM/SIGHUP
mid-tune. Real ``tracea`` subprocesses, real gcc, real SQLite; after every case the file passes
``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tracea.kernels import Gemm
from tracea.tuner.db import DatabaseChangedError, TuningDB
from tracea.tuner.trial import Measurement, Trial

TESTS = Path(__file__).resolve().parent
TUNE = ["tune", "gemm", "--m", "64", "--backend", "cpu", "--no-tui", "--repeat", "2", "--warmup", "1"]


def tracea(*args: str, timeout: float = 180, env: dict[str, str] | None = None,
           prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*(prefix or []), sys.executable, "-m", "tracea", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or os.environ.copy())


def _as_from_a_terminal() -> None:
    """The signals a user's terminal delivers, at their default disposition in the child: a run started under
    `nohup` or as a background job of a script inherits SIGHUP or SIGINT ignored, which `tracea tune` rightly
    keeps (that is what nohup asks for), and then no signal test could mean anything."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tracea", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy(), preexec_fn=_as_from_a_terminal)


def assert_clean(db_path: Path) -> None:
    """integrity_check ok and no foreign-key violation (read-only: the check changes nothing)."""
    if not db_path.exists():
        return
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def count_trials(db_path: Path) -> int:
    if not db_path.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def wait_for_trials(db_path: Path, proc: subprocess.Popen, n: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while count_trials(db_path) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the tune stored no trials in time"
        time.sleep(0.1)


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def manifest_status(home: Path) -> list[str]:
    return [json.loads(p.read_text())["status"] for p in sorted((home / "runs").glob("*/manifest.json"))]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """One real tune (3 candidates); each test copies the folder (database, compile cache, runs)."""
    src = tmp_path_factory.mktemp("tuned")
    env = {**os.environ, "TRACEA_HOME": str(src)}
    done = tracea(*TUNE, "--budget", "3", env=env)
    assert done.returncode == 0, done.stderr
    return src


@pytest.fixture
def tuned_home(tuned, tmp_path, monkeypatch) -> Iterator[Path]:
    """A copy of the tuned folder (database, compile cache, runs) that a test may change."""
    dst = tmp_path / "home"
    shutil.copytree(tuned, dst)
    monkeypatch.setenv("TRACEA_HOME", str(dst))
    yield dst
    for p in [dst, *dst.rglob("*")]:  # the read-only cases change modes: pytest must be able to clean up
        if p.is_dir():
            p.chmod(0o755)


def _sql(db_path: Path, statement: str, args: tuple = ()) -> None:
    conn = sqlite3.connect(db_path)  # foreign keys off, as any other tool would write
    conn.execute(statement, args)
    conn.commit()
    conn.close()


def _trial(i: int, ms: float = 1.0) -> Trial:
    sched = {"schema_version": 1, "backend": "cpu", "mr": 4, "nr": 4, "mc": 8 * (i + 1), "kc": 64, "nc": 64,
             "threads": 1, "unroll": 1, "prefetch": 0, "pack_a": True, "pack_b": True}
    return Trial(i, sched, f"cand{i}", Measurement("ok", p50_ms=ms, p95_ms=ms), 0.1)


def _start_run(db: TuningDB, key: str = "k") -> int:
    return db.start_run(key=key, op=Gemm(m=64, n=64, k=64), variant="cpu-portable.gemm", backend="cpu",
                        fingerprint="f", environment={}, strategy="random", seed=0, budget=10, space_size=10,
                        options={})


# --------------------------------------------------------------------------------- writers and clear


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


def test_bench_skips_a_stored_schedule_this_tracea_refuses(tuned_home) -> None:
    from tracea.doctor import probe
    from tracea.tuner.lookup import stored_schedule

    db_path = tuned_home / "tuning.sqlite"
    db = TuningDB.reader(db_path)
    best, k = db.best(db.find_keys("")[0]), db.keys()[0]
    db.close()
    broken = json.dumps({"schema_version": 1, "backend": "cpu", "mr": 4})  # parses as JSON, not as a schedule
    _sql(db_path, "UPDATE trials SET schedule = ?, schedule_key = ?, p50_ms = 1e-6 WHERE id = ?",
         (broken, json.dumps(json.loads(broken), sort_keys=True, separators=(",", ":")),
          [r for r in range(1, 4) if r != best["id"]][0]))
    warnings: list[str] = []
    import tracea.tuner.db as dbmod

    original = dbmod._stderr_warning
    dbmod._stderr_warning = warnings.append
    try:
        op = Gemm(m=64, n=64, k=64)
        got = stored_schedule(op, k["variant"], probe(), "cpu", str(db_path))
    finally:
        dbmod._stderr_warning = original
    assert got == json.loads(best["schedule"])
    assert any("its schedule is refused" in w for w in warnings), warnings


def test_a_key_prefix_is_not_a_pattern(tuned_home) -> None:
    for prefix in ("%", "_"):
        done = tracea("cache", "show", prefix)
        assert done.returncode == 2 and "no tuning key starts with" in done.stderr


# --------------------------------------------------------------------------------- damaged binaries


def _cached_so(home: Path) -> list[Path]:
    return sorted((home / "cache" / "cpu").glob("*.so"))


def _zero_body(path: Path) -> None:
    """An ELF header that passes the cheap check over a body the loader refuses."""
    data = bytearray(path.read_bytes())
    data[64:len(data) // 2] = bytes(len(data) // 2 - 64)
    path.write_bytes(bytes(data))


BENCH_48 = ("bench", "gemm", "--m", "48", "--repeat", "2")


@pytest.fixture(scope="module")
def benched(tmp_path_factory) -> Path:
    """A home after one bench: its compile cache holds the kernel's .so (each damage case copies it)."""
    home = tmp_path_factory.mktemp("benched") / "home"
    first = tracea(*BENCH_48, env={**os.environ, "TRACEA_HOME": str(home)})
    assert first.returncode == 0, first.stderr
    return home


@pytest.mark.parametrize("damage", ["garbage", "truncated", "zeroed body"])
def test_a_damaged_cached_so_is_rebuilt_once_by_bench(benched, home, damage) -> None:
    shutil.copytree(benched, home, dirs_exist_ok=True)
    (so,) = _cached_so(home)
    good = so.stat().st_size
    if damage == "garbage":
        so.write_bytes(b"not a shared object\n")
    elif damage == "truncated":
        so.write_bytes(so.read_bytes()[: good // 3])
    else:
        _zero_body(so)
    again = tracea(*BENCH_48)
    assert again.returncode == 0, again.stderr
    assert f"cached binary {so} was damaged" in again.stderr and "compiling it again" in again.stderr
    assert so.read_bytes()[:4] == b"\x7fELF" and so.stat().st_size == good
    third = tracea(*BENCH_48)
    assert third.returncode == 0 and "damaged" not in third.stderr  # rebuilt once, then a plain hit


def test_a_damaged_cached_so_is_not_a_permanent_compile_failure_in_tune(tuned_home) -> None:
    for so in _cached_so(tuned_home):
        _zero_body(so)
    done = tracea(*TUNE, "--budget", "2", "--retune", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["statuses"] == {"ok": 2}
    assert_clean(tuned_home / "tuning.sqlite")


def test_a_truncated_cached_cubin_is_compiled_again(tmp_path, monkeypatch, capsys) -> None:
    from tracea.doctor.errors import ToolchainMissingError
    from tracea.emitters import nvrtc as nv

    try:
        nv.find_nvrtc()
    except ToolchainMissingError:
        pytest.skip("NVRTC is not installed")
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }'
    cubin, _, _, hit, _ = nv.compile_cached(src, "twice", "k", "sm_80")
    assert not hit
    good = cubin.read_bytes()
    cubin.write_bytes(good[: len(good) // 2])
    again, _, _, hit, _ = nv.compile_cached(src, "twice", "k", "sm_80")
    assert not hit and again.read_bytes() == good
    assert "was damaged (truncated" in capsys.readouterr().err
    assert nv.compile_cached(src, "twice", "k", "sm_80")[3]  # and a hit after that


# ---------------------------------------------------------------------------------------- signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_tune_marks_the_run_interrupted_and_kills_the_workers(home, sig) -> None:
    db_path = home / "tuning.sqlite"
    proc = start(*TUNE, "--budget", "40", "--patience", "0")
    wait_for_trials(db_path, proc, 2)
    workers = children(proc.pid)
    assert workers
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err
    else:
        assert proc.returncode == 128 + sig and f"interrupted ({sig.name})" in err, err
    assert all(gone(pid) for pid in workers)  # already gone when the tuner exits: none left computing
    db = TuningDB.reader(db_path)
    (run,) = db.conn.execute("SELECT id, state FROM runs").fetchall()
    assert run["state"] == "interrupted"
    stored = len(db.trials(run_id=run["id"]))
    db.close()
    assert manifest_status(home) == ["interrupted"]
    assert_clean(db_path)
    if sig == signal.SIGTERM:  # and --resume continues that very run to its (new) budget
        resumed = tracea(*TUNE, "--resume", "--budget", str(stored + 1), "--json")
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout)["run_id"] == run["id"]
        db = TuningDB.reader(db_path)
        assert db.run(run["id"])["state"] == "done" and len(db.trials(run_id=run["id"])) == stored + 1
        db.close()
        assert_clean(db_path)


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


HANGING = textwrap.dedent("""
    from tracea.__main__ import _install_signal_handlers
    from tracea.doctor import probe
    from tracea.kernels import Gemm
    from tracea.tuner.run import Evaluation, SearchLimits, Target, TuneConfig, tune
    _install_signal_handlers()  # the CLI's handlers, around a tune whose third candidate never returns
    try:
        tune(Gemm(m=32, n=32, k=32), probe(), TuneConfig(Target(module="test_tuner_fault_backend"),
             Evaluation(timeout_s=60, repeats=2, warmup=1, min_seconds=0.0),
             SearchLimits(strategy="exhaustive", patience=None)))
    except KeyboardInterrupt:
        raise SystemExit(143)
""")


def test_sigterm_kills_a_hung_worker_at_once(home, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    db_path = home / "tuning.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", HANGING], stderr=subprocess.PIPE, text=True)
    wait_for_trials(db_path, proc, 2)
    time.sleep(0.5)  # the hanging candidate is now in flight
    workers = children(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 143 and time.monotonic() - t0 < 4.5  # not the worker's 5 s grace, not 60 s
    assert workers and all(gone(pid) for pid in workers)
    db = TuningDB.reader(db_path)
    assert db.latest_run(db.find_keys("")[0])["state"] == "interrupted"
    assert all(t["status"] != "runtime_failed" or "SIGKILL" not in (t["error"] or "") for t in db.trials())
    db.close()
    assert_clean(db_path)


def test_bench_dump_ir_onto_a_file_is_bad_input_before_a_run_opens(home) -> None:
    target = home / "taken"
    target.write_text("mine\n")
    done = tracea("bench", "gemm", "--m", "32", "--dump-ir", str(target))
    assert done.returncode == 2
    assert done.stderr.startswith("error: --dump-ir:") and "not a folder" in done.stderr
    assert "Traceback" not in done.stderr and target.read_text() == "mine\n"
    assert not (home / "runs").exists() or manifest_status(home) == []  # no run was opened


@pytest.mark.parametrize("failure", [OSError("disk full"), KeyboardInterrupt()])
def test_a_run_is_closed_even_when_recording_its_failure_fails(home, failure) -> None:
    from tracea.reports.record import Built, RunRecorder

    def dump(*args, **kwargs):
        raise failure

    with pytest.raises(type(failure) if isinstance(failure, KeyboardInterrupt) else RuntimeError):
        with RunRecorder("bench", ["bench"], None) as rec:
            rec.builds.append(Built(Gemm(m=8, n=8, k=8), None, {"x": 1}, source="int main;", language="c"))
            rec.dump = dump  # the IR dump of what was built fails while the crash is recorded
            raise RuntimeError("kernel crashed")
    assert manifest_status(home) == ["error"]
