"""Regenerate the shell completion scripts from the Typer app:  python completions/generate.py

The scripts call back into `tracea` (Click's dynamic completion), so they stay right as commands
change; tests/cli/test_completions.py fails when these files differ from what the installed Typer makes.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
SHELLS = {"bash": "tracea.bash", "zsh": "_tracea", "fish": "tracea.fish"}


def script(shell: str) -> str:
    from typer._completion_shared import get_completion_script

    return get_completion_script(prog_name="tracea", complete_var="_TRACEA_COMPLETE", shell=shell).strip() + "\n"


def main() -> int:
    for shell, name in SHELLS.items():
        (HERE / name).write_text(script(shell))
        print(f"wrote completions/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
