"""The repository's promises about itself: CI runs the README's test command."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


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


def test_the_readme_names_every_extra_and_the_one_plot_needs():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    listed = re.search(r"^Extras: (.*?)\.$", readme, re.MULTILINE | re.DOTALL).group(1)
    assert [name for name in extras if f"`{name}`" not in listed] == []
    plot = re.search(r"--plot.{0,80}?\(the `plot` extra:\s+`pip install 'tracea\[plot\]'`\)", readme, re.DOTALL)
    assert plot, "the README's --plot should say it needs the plot extra, and how to install it"


def _package_folders(mapping: dict[str, str]) -> dict[str, Path]:
    """Each folder with an __init__.py under the package-dir map's folders, by its installed name."""
    found = {}
    for package, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found[".".join((package, *rel.parts))] = init.parent
    return found


def test_a_build_holds_every_package_folder_and_module(tmp_path):
    """The package list is read from the folders (setup.py), so a new folder under a layer (a backend's
    emitters/<name>/, its cores/) installs without a line anywhere: built for real (setuptools' build_py, the
    step a wheel and an install take the modules from), the build holds every package folder and every module
    in it, and nothing else."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    src = tmp_path / "src"
    for name in ("pyproject.toml", "setup.py", "README.md"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    for folder in mapping.values():
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # a package folder no list names: it must install too
    (src / "emitters" / "probe_backend" / "cores").mkdir(parents=True)
    for rel in ("probe_backend/__init__.py", "probe_backend/cores/__init__.py", "probe_backend/cores/one.py"):
        (src / "emitters" / rel).write_text("")
    # setuptools' own build_py: what a wheel and an install copy, without needing the wheel package here
    out = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
                         cwd=src, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    shipped = {p.relative_to(tmp_path / "lib").as_posix() for p in (tmp_path / "lib").rglob("*.py")}

    expected = set()
    for package, folder in _package_folders(mapping).items():
        for module in folder.glob("*.py"):
            expected.add("/".join((*package.split("."), module.name)))
    expected |= {"tracea/emitters/probe_backend/__init__.py", "tracea/emitters/probe_backend/cores/__init__.py",
                 "tracea/emitters/probe_backend/cores/one.py"}
    assert shipped == expected


TOP_LEVEL = {"pyproject.toml", "setup.py", "README.md", "tracea_cli/", "doctor/", "emitters/", "kernels/", "tuner/", "reports/",
             "tests/", "completions/", "benchmarks/", "docs/"}


def _top_level_entries() -> set[str]:
    """The repository's top-level entries, folders ending in '/', dot-names left out.

    From `git ls-files` where this is a git checkout: the promise is about what the repository holds, so
    tracked files are what counts, and a developer's .venv, build/ or scratch file (ignored or never added)
    cannot fail it, while a stray folder that gets committed does. Elsewhere (an unpacked archive, a copy
    without .git) the folder as it is, less what the root .gitignore names."""
    git = shutil.which("git")
    if git and (ROOT / ".git").exists():
        p = subprocess.run([git, "-C", str(ROOT), "ls-files", "-z"], capture_output=True, text=True)
        if p.returncode == 0 and p.stdout:
            paths = [s for s in p.stdout.split("\0") if s]
            return {s.split("/")[0] + ("/" if "/" in s else "") for s in paths if not s.startswith(".")}
    ignored = [ln.strip().strip("/") for ln in (ROOT / ".gitignore").read_text().splitlines()
               if ln.strip() and not ln.startswith(("#", "!"))] if (ROOT / ".gitignore").exists() else []
    return {e.name + ("/" if e.is_dir() else "") for e in ROOT.iterdir()
            if not e.name.startswith(".") and not any(fnmatch.fnmatch(e.name, g) for g in ignored)}


def test_top_level_holds_only_the_product():
    """Device-run logs live in docs/device-runs/, GPU scripts in benchmarks/gpu/ (issue 15)."""
    assert _top_level_entries() == TOP_LEVEL


def _tracked_files() -> list[str]:
    """The repository's files: git's list where this is a checkout (a local folder git ignores, a GPU
    snapshot or a build, must not stand in for a file the page names), else every file below the root."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        out = None
    if out is not None and out.returncode == 0 and out.stdout.strip():
        return out.stdout.splitlines()
    return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts
            and ".venv" not in p.parts]


def test_the_architecture_page_names_files_that_exist():
    """docs/architecture.md must lead a reader to real files: every backticked path in it names a file or
    folder of the repository (by its path, or a suffix of one where the text gives the folder around it),
    except the files its walkthroughs say to create and the top-level folder it says cannot exist."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    to_create = {"emitters/hip/", "cuda/flash.py", "emitters/cpu/attention.py", "tracea.emitters.hip",
                 "tracea.emitters.hip.backend", "tracea/"}
    tracked = _tracked_files()
    tracked += sorted({"/".join(t.split("/")[:i]) + "/" for t in tracked for i in range(1, t.count("/") + 1)})
    missing = []
    for token in set(re.findall(r"`([^`\s]+)`", text)):
        if token in to_create or token.startswith("../") or not re.fullmatch(r"[\w./-]+(\.py|\.md|/)", token):
            continue
        if not any(t == token or t.endswith("/" + token) for t in tracked):
            missing.append(token)
    assert not missing, f"docs/architecture.md names paths that do not exist: {sorted(missing)}"
