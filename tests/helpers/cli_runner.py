"""The in-process CLI runner the tests of several folders share (tests/cli/test_cli_inputs.py,
tests/emitters/hip/test_hip_backend.py, tests/house/test_shared_tables.py): ``tracea.__main__.main``, where the
error policy lives, with what it printed."""

from __future__ import annotations

from tracea.__main__ import main


def tracea(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err
