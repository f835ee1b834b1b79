"""The compiled replay loop of a recorded launch (emitters/cuda/launches.py, ``REPLAY_C``), built by the real
C compiler and run without a GPU: libcuda's three functions are stood in for by C-callable ctypes callbacks,
so the loop calls them through the same function pointers it would call the driver's. What it proves: each
step reaches its function with the recorded arguments and the stream of the replay, in order; a step that
fails stops the loop, is retried as the Python loop retries it (a thread without a context) or raised, and
the steps after it still run; a tape of stand-ins that are no C functions replays in Python."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from libcuda_stand_in import libcuda_stand_in  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import LaunchError
from tracea.emitters.cuda import launches

vp, u = ctypes.c_void_p, ctypes.c_uint
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, vp, u, u, u, u, u, u, u, vp, vp, vp)
COOP = ctypes.CFUNCTYPE(ctypes.c_int, vp, u, u, u, u, u, u, u, vp, vp)
COPY = ctypes.CFUNCTYPE(ctypes.c_int, vp, vp)


class Driver:
    """libcuda's launch and copy functions as C function pointers; each call's arguments kept (the kernel's
    first argument read back through its parameter array)."""

    def __init__(self):
        self.calls, self.fail = [], {}

        def first(params):
            return ctypes.c_uint64.from_address(ctypes.cast(params, ctypes.POINTER(vp))[0]).value

        def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            self.calls.append(("launch", f, (gx, gy, gz), (bx, by, bz), smem, stream or 0, first(params), extra))
            return self.fail.pop(len(self.calls), 0)

        def coop(f, gx, gy, gz, bx, by, bz, smem, stream, params):
            self.calls.append(("coop", f, (gx, gy, gz), (bx, by, bz), smem, stream or 0, first(params)))
            return self.fail.pop(len(self.calls), 0)

        def copy(desc, stream):
            self.calls.append(("copy", desc, stream or 0))
            return self.fail.pop(len(self.calls), 0)

        self.cuLaunchKernel, self.cuLaunchCooperativeKernel = LAUNCH(launch), COOP(coop)
        self.cuMemcpy2DAsync_v2 = COPY(copy)
        self.cuCtxSetCurrent = lambda ctx: self.calls.append(("ctx", ctx)) or 0


@pytest.fixture
def driver(monkeypatch, home):
    return libcuda_stand_in(monkeypatch, Driver())


class Copy:
    def __init__(self, address):
        self.address = address

    def getPtr(self):  # noqa: N802 - cuda-bindings' name
        return self.address


def _tape():
    with launches.recording() as tape:
        launches.kernel(0x1234, (3, 2, 1), (128, 1, 1), 4096, 7, [np.uint64(555), np.int32(9)])
        launches.memcpy2d(Copy(0xBEEF), 7)
        launches.kernel(0x5678, 40, 256, 0, 7, [np.uint64(777)], cooperative=True)
    return tape


def test_the_compiled_loop_makes_the_recorded_calls_on_the_replays_stream(driver):
    tape = _tape()
    recorded = list(driver.calls)
    driver.calls.clear()
    tape.replay(99)
    assert tape._native, "the replay loop was not compiled (a C compiler is part of the test extras' machine)"
    assert driver.calls == [(*c[:5], 99, *c[6:]) if c[0] != "copy" else ("copy", c[1], 99) for c in recorded]
    assert driver.calls[0] == ("launch", 0x1234, (3, 2, 1), (128, 1, 1), 4096, 99, 555, None)
    assert driver.calls[1] == ("copy", 0xBEEF, 99)
    assert driver.calls[2] == ("coop", 0x5678, (40, 1, 1), (256, 1, 1), 0, 99, 777)


def test_a_failed_step_is_raised_and_a_context_error_is_retried(driver):
    tape = _tape()
    tape.replay(1)
    driver.calls.clear()
    driver.fail = {2: 700}  # the copy: CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(LaunchError, match="error 700"):
        tape.replay(5)
    assert [c[0] for c in driver.calls] == ["launch", "copy"]  # the loop stopped there
    driver.calls.clear()
    launches.CONTEXT[0], saved = 4242, launches.CONTEXT[0]
    try:
        driver.fail = {2: launches.INVALID_CONTEXT}  # this thread had no context: made current, the step again
        tape.replay(6)
    finally:
        launches.CONTEXT[0] = saved
    assert [c[0] for c in driver.calls] == ["launch", "copy", "ctx", "copy", "coop"]


def test_without_the_compiled_loop_the_tape_replays_in_python(driver, monkeypatch):
    monkeypatch.setenv("TRACEA_NATIVE_LAUNCH", "0")
    tape = _tape()
    driver.calls.clear()
    tape.replay(3)
    assert tape._native == () and [c[0] for c in driver.calls] == ["launch", "copy", "coop"]
    assert driver.calls[0][5] == 3
