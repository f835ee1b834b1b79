"""Shared fixtures. GPU tests carry the `gpu` marker and are skipped cleanly where NVML finds no GPU."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@functools.lru_cache(maxsize=1)
def _nvidia_gpu_present() -> str | None:
    """None when a GPU answers through NVML, else the reason to skip."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return None if pynvml.nvmlDeviceGetCount() > 0 else "NVML sees no NVIDIA GPU"
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001
        return f"no NVIDIA GPU here ({type(exc).__name__})"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords:
            reason = _nvidia_gpu_present()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    """A fresh binary cache (TRACEA_HOME) for a module: every kernel is really compiled there. Modules
    that compile take it with ``pytestmark = pytest.mark.usefixtures("kernel_cache")``."""
    import os

    old = os.environ.get("TRACEA_HOME")
    os.environ["TRACEA_HOME"] = str(tmp_path_factory.getbasetemp() / "tracea-home")
    yield
    if old is None:
        os.environ.pop("TRACEA_HOME", None)
    else:
        os.environ["TRACEA_HOME"] = old


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh ``TRACEA_HOME`` for a test that runs commands (a test module may define its own)."""
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
