"""DESIGN.md's layering and the start-up budget: nothing below tracea_cli imports Typer or Textual,
and `tracea --help`, `import tracea` and Tab-completion import nothing heavy. Each check runs in a
fresh interpreter and inspects sys.modules (the harlequin habit)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import tracea.doctor

HEAVY = ("pynvml", "cuda", "amdsmi", "textual", "numpy", "torch", "sklearn", "cpuinfo")


def modules_after(code: str) -> set[str]:
    prog = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _roots(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


DOCTOR_MODULES = sorted(
    f"tracea.doctor.{m.name}" for m in pkgutil.walk_packages(tracea.doctor.__path__, "") if not m.name.startswith("_")
)


@pytest.mark.parametrize("module", DOCTOR_MODULES)
def test_doctor_imports_no_ui(module):
    roots = _roots(modules_after(f"import {module}"))
    assert not roots & {"typer", "textual", "click", "rich"}, module


def test_import_tracea_is_light():
    assert not _roots(modules_after("import tracea")) & {*HEAVY, "typer", "rich"}


def test_help_imports_nothing_heavy():
    code = "from tracea.__main__ import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    roots = _roots(modules_after(code))
    assert not roots & set(HEAVY), roots & set(HEAVY)


def test_doctor_json_imports_no_textual_or_numpy():
    code = ("import io, contextlib\nfrom tracea.__main__ import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    main(['doctor', '--json'])")
    roots = _roots(modules_after(code))
    assert not roots & {"textual", "numpy", "torch", "cpuinfo"}
