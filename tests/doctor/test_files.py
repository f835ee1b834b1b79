"""One atomic write for the project (doctor/files.py): whole files or none, never a device replaced."""

from __future__ import annotations

import os
import stat

import pytest

from tracea.doctor.errors import BadInputError
from tracea.doctor.files import write_atomic


def test_writes_replaces_and_creates_parents(tmp_path):
    target = tmp_path / "a" / "b" / "f.json"
    write_atomic(target, "one\n")
    assert target.read_text() == "one\n"
    write_atomic(target, b"\x00two")
    assert target.read_bytes() == b"\x00two"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]  # no temporary file left behind


def test_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "f", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f").stat().st_mode) == 0o640


def test_refuses_to_replace_what_is_not_a_regular_file(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(BadInputError, match="not a regular file"):
        write_atomic(tmp_path / "d", "x")
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    with pytest.raises(BadInputError):
        write_atomic(fifo, "x")
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "f"
    target.write_text("old")

    class Boom(str):
        def encode(self, *a, **k):  # fails after the temporary file exists
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(target, Boom("new"))
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_there_is_one_definition_in_the_project():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    defs = [f"{p.relative_to(root)}" for layer in ("tracea_cli", "doctor", "emitters", "kernels", "tuner", "reports")
            for p in (root / layer).rglob("*.py")
            for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.FunctionDef) and n.name == "write_atomic"]
    assert defs == ["doctor/files.py"]
