"""A kernel that crashes, hangs or raises during bench's first run is a recorded status, not the end of
Tracea: ``run_isolated`` runs it in a forked child. The crashes here are real (a NULL read through
ctypes, a signal), not mocked statuses."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import pytest

from tracea.emitters.bench import run_isolated

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def test_a_segfault_is_runtime_failed_with_the_signal():
    status, value, error = run_isolated(lambda: ctypes.string_at(0), timeout_s=30)
    assert status == "runtime_failed" and value is None
    assert "SIGSEGV" in error


def test_an_abort_is_runtime_failed():
    status, _, error = run_isolated(lambda: os.kill(os.getpid(), signal.SIGABRT), timeout_s=30)
    assert status == "runtime_failed" and "SIGABRT" in error


def test_a_hang_is_a_timeout_and_the_child_is_gone():
    t0 = time.monotonic()
    status, value, error = run_isolated(lambda: time.sleep(3600), timeout_s=1.0)
    assert status == "timeout" and value is None and "1 s" in error
    assert time.monotonic() - t0 < 10


def test_an_exception_keeps_its_message():
    def boom() -> float:
        raise RuntimeError("launch failed: out of resources")

    status, _, error = run_isolated(boom, timeout_s=30)
    assert status == "runtime_failed" and error == "RuntimeError: launch failed: out of resources"


def test_a_value_comes_back():
    assert run_isolated(lambda: 0.25, timeout_s=30) == ("ok", 0.25, None)
