"""The repository's promises about itself: CI runs the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.DOTALL)
    test_cmd = next(b for b in blocks if "pytest" in b)
    ci_lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))]
    assert ci_lines == [test_cmd]


def test_readme_install_command_runs_the_doctor():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.DOTALL)
    assert any(b.strip().endswith("tracea doctor") and "pip install ." in b for b in blocks)
