"""Completion scripts are generated from the Typer app and must not go stale; Tab-completion answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "completions"))
import generate  # noqa: E402


@pytest.mark.parametrize(("shell", "name"), sorted(generate.SHELLS.items()))
def test_completion_scripts_are_fresh(shell, name):
    committed = (ROOT / "completions" / name).read_text()
    assert committed == generate.script(shell), f"completions/{name} is stale: run python completions/generate.py"


def _complete(words: str) -> list[str]:
    env = {**os.environ, "_TRACEA_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    out = subprocess.run([sys.executable, "-m", "tracea"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_tab_completes_commands_and_options():
    assert "doctor" in _complete("tracea doc")
    assert _complete("tracea doctor --js") == ["--json"]
    assert {"--input", "--save", "--measure", "--tui"} <= set(_complete("tracea doctor --"))
