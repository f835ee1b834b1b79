"""libcuda's launch functions stood in for (tests/emitters/cuda/test_cuda_launch_replay.py,
tests/ops/test_ops_native_call.py): C-callable ctypes callbacks in place of the driver's, so the compiled replay
loop calls them through the same function pointers it would call the driver's."""

from __future__ import annotations

from tracea.emitters.cuda import launches


def libcuda_stand_in(monkeypatch, driver):
    """``driver`` (C-callable stand-ins for libcuda's launch functions) as launches.py's CUDA driver, the
    compiled replay loop built anew in the test's compile cache and on, errors named by code."""
    monkeypatch.setattr(launches, "_LIB", [driver])
    monkeypatch.setattr(launches, "_NATIVE", [])
    monkeypatch.setattr(launches, "error_name", lambda rc: f"error {rc}")
    monkeypatch.delenv("TRACEA_NATIVE_LAUNCH", raising=False)
    return driver
