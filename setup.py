"""The package list, read from the folders: every folder with an __init__.py under a layer of
pyproject.toml's package-dir map is installed, so a new backend folder (or any sub-package) needs no
line here or in pyproject.toml. Everything else about the build is in pyproject.toml."""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the build requires tomli there (pyproject.toml [build-system])
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    """`tracea.<layer>.<sub>...` for each package folder under each folder the package-dir map names."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    found = []
    for package, folder in mapping.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            if "__pycache__" not in parts:
                found.append(".".join((package, *parts)))
    return found


setup(packages=packages())
