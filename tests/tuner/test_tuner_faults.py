"""Candidates that segfault, never return, compute a wrong answer or do not compile are recorded results
and the run completes; a tuner killed with SIGKILL mid-run leaves a readable database and resumes.

The faults are real (tests/tuner/test_tuner_fault_backend.py: C compiled by the host compiler, run in the
tuner's worker process), not mocked statuses.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tracea.kernels import Gemm
from tracea.tuner.db import TuningDB
from tracea.tuner.run import Evaluation, Outputs, SearchLimits, Target, TuneConfig, tune

TESTS = Path(__file__).resolve().parent
FAULT_MODULE = "test_tuner_fault_backend"


@pytest.fixture
def fault_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def _host():
    from tracea.doctor import probe

    return probe()


def test_every_fault_is_recorded_and_the_run_completes(fault_env) -> None:
    op = Gemm(m=32, n=32, k=32)
    config = TuneConfig(Target(module=FAULT_MODULE), Evaluation(timeout_s=4.0, repeats=3, warmup=1, min_seconds=0.0),
                        SearchLimits(strategy="exhaustive", patience=None))
    result = tune(op, _host(), config)
    by_mode = {t.schedule["mode"]: t.measurement for t in result.trials}
    assert set(by_mode) == {"ok", "segfault", "hang", "wrong", "nocompile", "slow"}
    assert by_mode["ok"].status == "ok" and by_mode["ok"].p50_ms > 0
    assert by_mode["slow"].status == "ok"
    assert by_mode["segfault"].status == "runtime_failed" and "SIGSEGV" in by_mode["segfault"].error
    assert by_mode["hang"].status == "timeout" and "4 s" in by_mode["hang"].error
    assert by_mode["wrong"].status == "wrong_result" and by_mode["wrong"].rel_err > 1e-3
    assert by_mode["nocompile"].status == "compile_failed" and "failed" in by_mode["nocompile"].error
    assert result.best["schedule"]["mode"] in ("ok", "slow")
    db = TuningDB()
    rows = db.trials(result.key)
    assert sorted(r["status"] for r in rows) == sorted(m.status for m in by_mode.values())
    assert db.run(result.run_id)["state"] == "done"
    # the failures are observed: a new run under the same key evaluates none of them again
    again = tune(op, _host(), TuneConfig(Target(module=FAULT_MODULE), Evaluation(timeout_s=4.0),
                                         SearchLimits(strategy="exhaustive", retune=True)))
    assert again.trials == [] and again.stop_reason == "the space is exhausted"


def _gone(pid: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


KILLABLE = textwrap.dedent("""
    import sys
    from tracea.doctor import probe
    from tracea.kernels import Gemm
    from tracea.tuner.run import Evaluation, SearchLimits, Target, TuneConfig, tune
    tune(Gemm(m=32, n=32, k=32), probe(), TuneConfig(Target(module="test_tuner_fault_backend"),
         Evaluation(timeout_s=float(sys.argv[1]), repeats=2, warmup=1, min_seconds=0.0),
         SearchLimits(strategy="exhaustive", patience=None, resume=sys.argv[2] == "resume")))
""")


def test_sigkill_mid_run_leaves_a_readable_database_and_resume_continues(fault_env) -> None:
    db_path = fault_env / "tuning.sqlite"
    # the third candidate hangs for up to 60 s: the tuner is killed while it is in flight
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE, "60", "new"])
    deadline = time.monotonic() + 60
    seen = 0
    while time.monotonic() < deadline:
        if db_path.exists():
            try:
                with sqlite3.connect(db_path, timeout=5) as c:
                    seen = c.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
            except sqlite3.OperationalError:
                seen = 0
        if seen >= 2:
            break
        time.sleep(0.1)
    time.sleep(0.5)  # the hang is now in flight
    workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                              text=True).stdout.split()]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert seen >= 2 and workers

    db = TuningDB(db_path)
    assert db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    (run,) = [db.run(r["id"]) for r in db.conn.execute("SELECT id FROM runs").fetchall()]
    assert run["state"] == "running"  # killed: never marked finished
    before = db.trials(run_id=run["id"])
    assert [t["status"] for t in before] == ["ok", "runtime_failed"]  # hero, then the segfault; the hang was lost
    db.close()
    # the hung worker died with its tuner (PR_SET_PDEATHSIG): nothing is left spinning
    assert all(_gone(pid) for pid in workers)

    subprocess.run([sys.executable, "-c", KILLABLE, "3", "resume"], check=True, timeout=120)
    db = TuningDB(db_path)
    after = db.trials(run_id=run["id"])
    assert [t["id"] for t in after[:2]] == [t["id"] for t in before]  # the same run, continued
    assert len(after) == 6 and len({t["schedule_key"] for t in after}) == 6  # nothing evaluated twice
    assert db.run(run["id"])["state"] == "done"
    assert {t["status"] for t in after} == {"ok", "runtime_failed", "timeout", "wrong_result", "compile_failed"}


@pytest.mark.gpu
def test_gpu_faults_are_recorded_and_the_worker_recovers(fault_env) -> None:
    """On a GPU: a kernel that spins forever, one that writes through a null pointer (a sticky error: the
    CUDA context is dead afterwards), one that traps, one that lies and one that does not compile are each
    recorded; the healthy candidate after them still runs (a fresh worker, a fresh context)."""
    op = Gemm(m=64, n=48, k=32)
    config = TuneConfig(Target(backend="cuda", module="test_tuner_cuda_fault_backend"),
                        Evaluation(timeout_s=20.0, repeats=3, warmup=1, min_seconds=0.0, compile_ahead=False),
                        SearchLimits(strategy="exhaustive", patience=None))
    result = tune(op, _host(), config)
    by_mode = {t.schedule["mode"]: t.measurement for t in result.trials}
    assert set(by_mode) == {"ok", "illegal", "hang", "trap", "wrong", "nocompile", "ok2"}
    assert by_mode["ok"].status == "ok" and by_mode["ok"].p50_ms > 0
    assert by_mode["illegal"].status == "runtime_failed" and "ILLEGAL" in by_mode["illegal"].error.upper(), by_mode["illegal"]
    assert by_mode["hang"].status == "timeout", by_mode["hang"]
    assert by_mode["trap"].status == "runtime_failed", by_mode["trap"]
    assert by_mode["wrong"].status == "wrong_result" and by_mode["wrong"].rel_err > 1e-3
    assert by_mode["nocompile"].status == "compile_failed" and "NVRTC" in by_mode["nocompile"].error
    assert by_mode["ok2"].status == "ok", by_mode["ok2"]  # after every fault: recovered
    assert result.best["schedule"]["mode"] in ("ok", "ok2")
    assert TuningDB().run(result.run_id)["state"] == "done"


def test_a_crash_of_the_tuner_itself_leaves_a_crash_bundle(fault_env, capsys) -> None:
    """Not a candidate's failure (those are results) but the tuner's own: here the progress callback
    raises after the first trial. The run folder is marked "error", keeps the traceback and a crash
    bundle whose path is printed; the database keeps the trial that finished."""
    import json
    import tarfile

    class DashboardBug(RuntimeError):
        pass

    def on_event(kind: str, data: dict) -> None:
        if kind == "trial":
            raise DashboardBug("the progress display broke")

    config = TuneConfig(Target(module=FAULT_MODULE), Evaluation(timeout_s=10.0, repeats=2, warmup=1, min_seconds=0.0),
                        SearchLimits(strategy="exhaustive", patience=None),
                        Outputs(argv=["tune", "gemm", "--m", "32"], run_folder=True))
    with pytest.raises(DashboardBug):
        tune(Gemm(m=32, n=32, k=32), _host(), config, on_event=on_event)
    (run_dir,) = [p for p in (fault_env / "runs").iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "error" and "DashboardBug" in manifest["error"]
    assert "the progress display broke" in (run_dir / "log.txt").read_text()
    bundle = run_dir / "crash-bundle.tar.gz"
    assert bundle.is_file() and f"crash bundle: {bundle}" in capsys.readouterr().err
    with tarfile.open(bundle) as tar:
        assert any(n.endswith("log.txt") for n in tar.getnames())
    (row,) = TuningDB(fault_env / "tuning.sqlite").trials()
    assert row["status"] == "ok"
