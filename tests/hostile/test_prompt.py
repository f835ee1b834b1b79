"""The question replay asks at a terminal names what runs: the default says nothing from the bundle
runs; each opt-in names itself and its risk. Answering no runs nothing (the hostile constructor's
marker stays absent), and everything shown before the question was decided before it."""

from __future__ import annotations

import io

import pytest
import typer

from .test_bundle_code import add_constructor


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("args", "question"), [
    ([], "Build and run Tracea's own kernels for these ops?"),
    (["--bundled-source"], "Run code from the bundle on this machine (--bundled-source)?"),
    (["--binary"], "Run code from the bundle on this machine (--binary)?"),
])
def test_the_question_names_the_opt_in_and_no_runs_nothing(hostile, monkeypatch, capsys, args, question):
    from tracea.__main__ import main

    add_constructor(hostile)
    hostile.resign()
    asked = []

    def answer_no(text, default=False):
        asked.append(text)
        return False

    monkeypatch.setenv("TRACEA_HOME", str(hostile.home))
    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr(typer, "confirm", answer_no)
    code = main(["replay", str(hostile.root), *args])
    captured = capsys.readouterr()
    out = captured.out
    # a refusal at the prompt is the user's choice, said in one line with the exit code of bad input
    assert code == 2 and asked == [question]
    assert "replay declined at the prompt: nothing was built or run" in captured.err
    assert not hostile.marker.exists()
    assert "replay will (all 1):" in out and "DIFFERS: source" in out  # the difference, before the question
    if args:
        assert f"RISK: {args[0]}" in out and "runs code from the bundle on this machine" in out
    else:
        assert "RISK" not in out and "nothing from the bundle is compiled, loaded or run" in out
    assert not (hostile.home / "cache").exists() or not any((hostile.home / "cache").rglob("*.so"))
