"""The option naming what a command writes is spelt the same on every command: `-o FILE`, `--output FILE`,
and the older `--out FILE`, which keeps working (`tracea cache export -o f` as `tracea pack-repro -o f`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tracea.__main__ import main
from tracea.app import build_command

SPELLINGS = ("-o", "--output", "--out")


def _commands(command: Any, path: str = "tracea") -> list[tuple[str, Any]]:
    out = [(path, command)]
    for name, sub in (getattr(command, "commands", None) or {}).items():
        out += _commands(sub, f"{path} {name}")
    return out


def test_every_output_option_takes_the_same_spellings() -> None:
    found = []
    for path, command in _commands(build_command()):
        for param in command.params:
            if param.name == "out":
                found.append(path)
                assert sorted(param.opts) == sorted(SPELLINGS), (path, param.opts)
    assert {"tracea pack-repro", "tracea cache export", "tracea emit gemm", "tracea export gemm"} <= set(found)


@pytest.mark.parametrize("flag", SPELLINGS)
def test_cache_export_and_pack_repro_write_where_each_spelling_says(capsys, home, tmp_path, flag) -> None:
    from tracea.doctor import probe
    from tracea.reports.runs import start_run

    export = tmp_path / "export.json"
    assert main(["cache", "export", flag, str(export)]) == 0, capsys.readouterr().err
    assert set(json.loads(export.read_text())) >= {"runs", "trials"}
    start_run("bench", ["bench"], probe()).finish("ok")  # a run to bundle
    bundle = tmp_path / "run.tar.gz"
    assert main(["pack-repro", flag, str(bundle)]) == 0, capsys.readouterr().err
    assert bundle.is_file() and bundle.stat().st_size > 0
    assert str(bundle) in capsys.readouterr().out


def test_an_unwritable_export_path_is_one_line(capsys, home, tmp_path) -> None:
    (tmp_path / "file").write_text("")
    code = main(["cache", "export", "-o", str(tmp_path / "file" / "x.json")])  # a file where a folder must be
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: -o/--output: cannot write ") and "Traceback" not in err
