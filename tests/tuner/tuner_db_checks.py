"""What the tests of the tuning database share (tests/tuner/test_tuner_db_*.py, test_cached_binaries.py,
test_run_endings.py): real ``tracea`` subprocesses (a tune started as from a terminal, waited on until it has
stored trials), the database's own checks (``PRAGMA integrity_check`` and ``foreign_key_check``, read-only),
its worker processes, and the fixtures: a fresh ``TRACEA_HOME`` (``home``), and a copy of a home after one
real tune (``tuned_home``, the tune made once per module by ``tuned``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    """A fresh ``TRACEA_HOME``: the test's own folder."""
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """One real tune (3 candidates), made once per module that takes it; each test copies the folder
    (database, compile cache, runs)."""
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
