"""Tracea: what is the fastest correct way to run this operation on this machine, and can you prove it?

The package is light on import so ``tracea --help`` and Tab-completion stay instant: the CLI, the
doctor and everything heavy load on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "Context", "TraceaError", "BadInputError", "UnsupportedError", "probe", "ops"]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tracea")
    except Exception:  # noqa: BLE001 - running from a source tree
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    if name in ("TraceaError", "BadInputError", "UnsupportedError", "SnapshotError", "ToolchainMissingError"):
        from tracea.doctor import errors

        return getattr(errors, name)
    if name == "Context":
        from .context import Context

        return Context
    if name == "ops":  # tracea.ops (NumPy; torch only for its PyTorch pieces): loaded on first use
        import importlib

        return importlib.import_module(".ops", __name__)
    if name == "probe":
        from tracea.doctor import probe

        return probe
    raise AttributeError(f"module 'tracea' has no attribute {name!r}")
