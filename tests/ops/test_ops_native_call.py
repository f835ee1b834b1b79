"""The prepared call in C (tracea_cli/ops/_native_call.py, ``LAUNCHER_C``), built by the real C compiler against
this interpreter's headers and run without a GPU: libcuda's launch is stood in for by a C-callable ctypes
callback, so the compiled replay loop calls it through the same function pointer it would call the driver's,
and a kernel object records its launches as ``launches.Tape``s the way ``CudaKernel.launch_ptrs`` does.

What it proves: a call whose pointers have a kept tape replays it on the caller's stream with no Python launch;
any other set of pointers (a new result, a new input) is launched by the kernel and never replayed from a stale
tape; the allocation, the counter and the route are the Python call's; the tapes kept are bounded; a failed
driver call is retried or raised by the tape's own loop, and a raised one sends the call to the slow path; no
reference leaks; ``TRACEA_NATIVE_LAUNCH=0`` keeps the call in Python."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import sysconfig
import threading
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
from libcuda_stand_in import libcuda_stand_in  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import LaunchError
from tracea.emitters.cuda import launches
from tracea.ops import _dispatch, _native_call, _prepared
from tracea.ops._engine import Route

HEADERS = os.path.isfile(os.path.join(sysconfig.get_paths().get("include") or "", "Python.h"))
pytestmark = pytest.mark.skipif(not HEADERS, reason="this interpreter has no Python.h to build an extension with")

vp, u = ctypes.c_void_p, ctypes.c_uint
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, vp, u, u, u, u, u, u, u, vp, vp, vp)


class Driver:
    """cuLaunchKernel as a C function pointer: each call's function, stream and pointer arguments (read back
    through the parameter array); ``fail``: the return code of the next calls."""

    def __init__(self):
        self.calls, self.fail = [], []

        def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            addrs = ctypes.cast(params, ctypes.POINTER(vp))
            args = tuple(ctypes.c_uint64.from_address(addrs[i]).value for i in range(3))
            self.calls.append((f, stream or 0, args))
            return self.fail.pop(0) if self.fail else 0

        self.cuLaunchKernel = LAUNCH(launch)
        self.cuCtxSetCurrent = lambda ctx: 0


@pytest.fixture
def driver(monkeypatch, home):
    monkeypatch.setattr(_native_call, "_TYPE", [])
    return libcuda_stand_in(monkeypatch, Driver())


class Kernel:
    """A kernel without scratch as ``tracea.ops`` sees one: ``launch_ptrs`` records its driver call as a tape
    per set of pointers (replayed when the set repeats), ``replayable`` hands that tape out."""

    ptr_names = ("a", "b", "out")

    def __init__(self):
        self.tapes, self.looked_up = {}, []

    def launch_ptrs(self, ptrs, stream):
        self.looked_up.append(ptrs)
        tape = self.tapes.get(ptrs)
        if tape is not None:
            tape.replay(stream)
            return
        with launches.recording() as tape:
            launches.kernel(0xF00, (2, 1, 1), (128, 1, 1), 0, stream, [np.uint64(p) for p in ptrs])
        self.tapes[ptrs] = tape

    def replayable(self, ptrs):
        return self.tapes.get(ptrs)


class Tensor:
    def __init__(self, p):
        self.p = p


def _prepared_call(outs, stream=5):
    """A Prepared over Kernel, with the compiled call; ``outs``: the results' pointers, in order."""
    k = Kernel()
    made = iter(outs)
    route = Route(op="gemm", path="tracea")

    def alloc_like(x):
        return Tensor(next(made))

    p = _prepared.Prepared(k, (0, 1, -1), (8, 8, 0), 8, lambda t: t.p, lambda arrays: alloc_like(arrays[0]),
                           lambda: stream, route, ("a", "b"))
    p.c_alloc = (alloc_like, 0)  # as keep() sets it for CUDA tensors: the first launch with a tape makes the call
    return p, k


def _made(p):
    assert p.fast is not None, "the compiled call was not built (a C compiler and Python.h are on this machine)"
    return p.fast


def _call(p, arrays):
    key = ("test-native-call", id(p))
    _prepared.PREPARED[key] = p
    try:
        return _dispatch.prepared(key, arrays, None)
    finally:
        _prepared.PREPARED.pop(key, None)


def test_kept_pointers_replay_on_the_callers_stream_and_new_ones_are_launched(driver):
    p, k = _prepared_call([33, 33, 44, 33, 33], stream=7)
    arrays = (Tensor(11), Tensor(22))
    before = Counter(_prepared.STATS)
    results = [_call(p, arrays) for _ in range(5)]
    assert [r.p for r in results] == [33, 33, 44, 33, 33]
    # launched by the kernel: the first set, the new result's set; replayed in C: the rest
    assert k.looked_up == [(11, 22, 33), (11, 22, 44)]
    assert [c[2] for c in driver.calls] == [(11, 22, 33), (11, 22, 33), (11, 22, 44), (11, 22, 33), (11, 22, 33)]
    assert {c[1] for c in driver.calls} == {7} and {c[0] for c in driver.calls} == {0xF00}
    assert _prepared.STATS["fast_path"] - before["fast_path"] == 5
    assert _prepared.LAST.route is p.route
    assert _made(p).tapes() == 2


def test_an_input_on_new_memory_is_never_replayed_from_a_stale_tape(driver):
    p, k = _prepared_call([33] * 4)
    _call(p, (Tensor(11), Tensor(22)))
    _call(p, (Tensor(11), Tensor(22)))
    _call(p, (Tensor(12), Tensor(22)))  # a new a: launched over its pointer
    assert [c[2] for c in driver.calls] == [(11, 22, 33), (11, 22, 33), (12, 22, 33)]
    assert k.looked_up == [(11, 22, 33), (12, 22, 33)]


def test_the_tapes_kept_are_bounded_and_the_oldest_leaves_first(driver):
    n = _native_call.TAPES + 1
    p, k = _prepared_call(list(range(1000, 1000 + n)) + [1000, 1000 + n - 1])
    for _ in range(n):
        _call(p, (Tensor(1), Tensor(2)))
    assert _made(p).tapes() == _native_call.TAPES
    _call(p, (Tensor(1), Tensor(2)))  # the first set was replaced: launched by the kernel again
    _call(p, (Tensor(1), Tensor(2)))  # the newest is kept: replayed
    assert k.looked_up[-1] == (1, 2, 1000) and len(k.looked_up) == n + 1
    assert driver.calls[-1][2] == (1, 2, 1000 + n - 1)


def test_a_failed_replay_is_raised_by_the_tapes_loop_and_the_call_goes_to_the_slow_path(driver):
    p, _ = _prepared_call([33] * 8)
    arrays = (Tensor(11), Tensor(22))
    _call(p, arrays)
    _call(p, arrays)
    driver.fail = [700]  # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(LaunchError, match="error 700"):
        _made(p)(arrays)
    driver.fail = [700]
    assert _call(p, arrays) is _prepared.RETRY
    launches.CONTEXT[0], saved = 4242, launches.CONTEXT[0]
    try:
        driver.fail = [launches.INVALID_CONTEXT]  # a thread without a context: made current, the step again
        assert _call(p, arrays).p == 33
    finally:
        launches.CONTEXT[0] = saved
    assert [c[2] for c in driver.calls[-2:]] == [(11, 22, 33)] * 2


def test_the_compiled_call_leaks_no_reference(driver):
    p, _ = _prepared_call([33] * 3000)
    arrays = (Tensor(11), Tensor(22))
    route = p.route
    for _ in range(10):
        _call(p, arrays)
    gc.collect()
    fast = _made(p)
    refs = sys.getrefcount(route), sys.getrefcount(arrays[0]), sys.getrefcount(fast)
    for _ in range(2000):
        _call(p, arrays)
    gc.collect()
    assert (sys.getrefcount(route), sys.getrefcount(arrays[0]), sys.getrefcount(fast)) == refs


def test_threads_replay_through_one_launcher(driver):
    p, _ = _prepared_call([33] * 10_000)
    arrays = (Tensor(11), Tensor(22))
    _call(p, arrays)
    errors = []

    def work():
        try:
            for _ in range(500):
                assert _call(p, arrays).p == 33
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(driver.calls) == 2001


def test_bad_arguments_are_refused(driver):
    launcher = _native_call.launcher_type()
    replay = ctypes.cast(launches.native_replay(), ctypes.c_void_p).value
    args = (lambda t: t.p, lambda: None, -1, lambda: 0, {}, "fast_path", SimpleNamespace(), None)
    with pytest.raises(ValueError):
        launcher((), *args, replay)
    with pytest.raises(ValueError):
        launcher(tuple(range(_native_call.MAX_PTRS + 1)), *args, replay)
    with pytest.raises(ValueError):
        launcher((0, -1), *args, 0)
    fast = launcher((0, 3, -1), *args, replay)
    with pytest.raises(IndexError):
        fast((Tensor(1),))
    with pytest.raises(TypeError):
        fast([Tensor(1)])
    with pytest.raises(ValueError):
        fast.add((1, 2), None, 1, 1)


def test_without_native_launches_the_call_stays_in_python(driver, monkeypatch):
    monkeypatch.setenv("TRACEA_NATIVE_LAUNCH", "0")
    assert _native_call.launcher_type() is None
    monkeypatch.delenv("TRACEA_NATIVE_LAUNCH")
    monkeypatch.setattr(_native_call, "_TYPE", [None])  # as without Python.h: the tapes compiled, the call not
    k = Kernel()
    p = _prepared.Prepared(k, (0, 1, -1), (8, 8, 0), 8, lambda t: t.p, lambda arrays: Tensor(33), lambda: 5,
                           Route(op="gemm", path="tracea"), ("a", "b"))
    p.c_alloc = (lambda: Tensor(33), -1)
    for _ in range(3):
        assert _call(p, (Tensor(11), Tensor(22))).p == 33
    assert k.looked_up == [(11, 22, 33)] and p.fast is None and p.c_alloc is None  # not asked again
    assert [c[2] for c in driver.calls] == [(11, 22, 33)] * 3


def test_the_ops_layer_imports_no_backend_for_the_compiled_call(driver):
    """The compiled call takes its replay loop from the first tape it keeps (the backend's own), so that
    tracea.ops names no backend module (tests/house/test_import_graph.py)."""
    p, _ = _prepared_call([33, 33])
    assert p.fast is None
    _call(p, (Tensor(11), Tensor(22)))
    assert _made(p).tapes() == 1
