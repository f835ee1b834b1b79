"""A run's records say how it ended (issue 14): a tune stopped by SIGTERM, SIGHUP or SIGINT kills its workers
and marks its run interrupted (``--resume`` continues it), SIGTERM kills a hung worker at once, bad input is
refused before a run is opened, and a run is closed as an error even when recording its failure fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tuner_db_checks import (
    TUNE,
    assert_clean,
    children,
    gone,
    manifest_status,
    start,
    tracea,
    wait_for_trials,
)
from tuner_db_checks import home as home  # a fixture (pytest finds it here by name)

from tracea.kernels import Gemm
from tracea.tuner.db import TuningDB

TESTS = Path(__file__).resolve().parent


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
