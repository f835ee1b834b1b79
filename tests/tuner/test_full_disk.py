"""A full disk under TRACEA_HOME (issue 30): tune, bench and pack-repro end with one line saying the disk is
full and how to recover (exit 3), never "internal error"; the tuning database stays intact and keeps every
trial written before; readers read it on the full disk; after space is freed, the next tune goes on.

The disk is real: a small tmpfs mounted in a private mount namespace (``unshare -m``) of the test's own,
so the mount disappears with the namespace even when the run is killed. The scenario runs there as one
script (every step's exit code and output kept on the real disk), and the test reads what happened. It
needs root (mounting) and util-linux's ``unshare``; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TUNE = "tune gemm --m 64 --backend cpu --no-tui --repeat 2 --warmup 1"
SCRIPT = textwrap.dedent("""\
    set -u
    mount -t tmpfs -o size={size} tmpfs "$DISK" || exit 97
    export TRACEA_HOME="$DISK/home"
    step() {{ name=$1; shift; "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"; echo $? > "$OUT/$name.rc"; }}
    leave() {{  # fill the disk but for $1 KiB
        rm -f "$DISK"/filler-*
        free=$(df --output=avail -k "$DISK" | tail -1)
        [ $((free - $1)) -gt 0 ] && dd if=/dev/zero of="$DISK/filler-a" bs=1k count=$((free - $1)) 2> /dev/null
        [ "$1" -eq 0 ] && dd if=/dev/zero of="$DISK/filler-b" bs=512 2> /dev/null
        true
    }}
    step first {py} -m tracea {tune} --budget 3
    cp "$TRACEA_HOME/tuning.sqlite" "$OUT/first.sqlite"
    leave 0
    step tune_full {py} -m tracea {tune} --budget 6 --retune
    step list {py} -m tracea cache list --json
    step export {py} -m tracea cache export
    step bench {py} -m tracea bench gemm --m 48 --backend cpu --repeat 2
    step pack {py} -m tracea pack-repro -o "$DISK/bundle.tar.gz"
    ls -a "$DISK" > "$OUT/disk.txt"
    leave {room}
    step tune_mid {py} -m tracea {tune} --budget 40 --patience 0 --retune --no-compile-ahead
    cp "$TRACEA_HOME/tuning.sqlite" "$OUT/mid.sqlite"
    rm -f "$DISK"/filler-*
    step tune_after {py} -m tracea {tune} --budget 2 --retune
    cp "$TRACEA_HOME/tuning.sqlite" "$OUT/after.sqlite"
""")


def _mounting_here() -> str | None:
    """None when a private mount namespace with a tmpfs can be made here, else why not."""
    if os.geteuid() != 0:
        return "mounting a small disk needs root"
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && umount /mnt"],
                           capture_output=True, text=True, timeout=60)
    return None if probe.returncode == 0 else f"a private tmpfs cannot be mounted here: {probe.stderr.strip()[:200]}"


def _counts(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        return (conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0],
                conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture(scope="module")
def full_disk(tmp_path_factory) -> Path:
    why = _mounting_here()
    if why:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("full-disk")
    disk, out = base / "disk", base / "out"
    disk.mkdir()
    out.mkdir()
    script = SCRIPT.format(size="24m", py=sys.executable, tune=TUNE, room=600)
    env = {**os.environ, "DISK": str(disk), "OUT": str(out)}
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", script], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _step(out: Path, name: str) -> tuple[int, str, str]:
    return int((out / f"{name}.rc").read_text()), (out / f"{name}.out").read_text(), (out / f"{name}.err").read_text()


def _one_clear_line(rc: int, err: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "internal error"))]
    assert rc == 3, err
    assert len(lines) == 1 and "no space left on the device" in lines[0], err
    assert "Traceback" not in err and "internal error" not in err and "malformed" not in err, err
    assert "hint: free space" in err, err


def test_a_tune_on_a_full_disk_says_so_and_leaves_the_database_intact(full_disk) -> None:
    rc, _, err = _step(full_disk, "tune_full")
    _one_clear_line(rc, err)
    first = _counts(full_disk / "first.sqlite")
    assert first[1] == 3
    assert _counts(full_disk / "mid.sqlite")[0] >= first[0]  # the earlier runs are all there


def test_readers_read_an_intact_database_on_a_full_disk(full_disk) -> None:
    rc, out, err = _step(full_disk, "list")
    assert rc == 0 and "disk I/O error" not in err, err
    (key,) = json.loads(out)["keys"]
    assert key["trials"] == 3
    rc, out, err = _step(full_disk, "export")
    assert rc == 0 and len(json.loads(out)["trials"]) == 3, err


@pytest.mark.parametrize("step", ["bench", "pack"])
def test_bench_and_pack_repro_on_a_full_disk_say_so(full_disk, step) -> None:
    rc, _, err = _step(full_disk, step)
    _one_clear_line(rc, err)
    assert "bundle.tar.gz" not in (full_disk / "disk.txt").read_text()  # no half-written bundle is left


def test_a_disk_that_fills_during_a_tune_stops_it_and_loses_no_stored_trial(full_disk) -> None:
    """Room for a few candidates (their sources, binaries and run-folder lines), then none: wherever the
    space ran out (the compile cache, the run folder or the database), the tune stops with the one line,
    no trial is stored as failed because of the disk, and the database stays intact; once space is freed,
    the next tune runs."""
    rc, _, err = _step(full_disk, "tune_mid")
    _one_clear_line(rc, err)
    conn = sqlite3.connect(f"file:{full_disk / 'mid.sqlite'}?mode=ro", uri=True)
    errors = [r[0] for r in conn.execute("SELECT error FROM trials WHERE status != 'ok'")]
    conn.close()
    assert not [e for e in errors if "space" in (e or "").lower()], errors
    _counts(full_disk / "mid.sqlite")
    rc, _, err = _step(full_disk, "tune_after")
    assert rc == 0, err
    runs, trials = _counts(full_disk / "after.sqlite")
    assert runs >= 3 and trials >= 3
