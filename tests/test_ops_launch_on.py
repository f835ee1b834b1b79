"""CudaKernel.launch_on without a GPU: a kernel object over a recording stand-in for the driver and
cuda-core's launch. What it proves: the caller's pointers reach the launch arguments, nothing is copied, the
kernel's own scratch is kept and ordered by events across streams (not while a graph is captured), a
subclass's memset goes onto the caller's stream, its prepared arguments are reused only for the same stream
and pointers, and the object is restored afterwards. The real launches are tests/test_ops_gpu.py's."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("cuda.core")

from tracea.doctor.errors import BadInputError  # noqa: E402
from tracea.emitters.cuda import runtime  # noqa: E402
from tracea.kernels import Gemm  # noqa: E402


class Driver:
    def __init__(self):
        self.calls = []
        self.capturing = False  # what cuStreamIsCapturing answers (a query: not recorded in calls)
        self.CUevent_flags = SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)
        self.CUstreamCaptureStatus = SimpleNamespace(CU_STREAM_CAPTURE_STATUS_NONE=0,
                                                     CU_STREAM_CAPTURE_STATUS_ACTIVE=1)

    def cuStreamIsCapturing(self, handle):  # noqa: N802 - the driver's name
        return 0, int(self.capturing)

    @staticmethod
    def CUstream(h):  # noqa: N802 - the driver's name
        return int(h)

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, *args))
            return (0, f"ev{len(self.calls)}") if name == "cuEventCreate" else (0,)
        return call


class Own:
    """A kernel-owned device buffer: copying into it during launch_on would be a defect."""

    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes = ptr, nbytes

    def upload(self, host):
        raise AssertionError("launch_on copied into a device buffer")


def _kernel(cls=runtime.CudaKernel, workspace=True):
    op = Gemm(m=5, n=3, k=4)
    k = object.__new__(cls)
    k.op, k._shapes, k._out_shape, k._dtype = op, op.shapes(), op.output_shape(), op.dtype.storage
    k.rendered = SimpleNamespace(params=("a", "b", "out", "workspace", "m"))
    k._scalars = {"m": 5}
    k._config, k._kernel = "config", "kernel"
    k._dbuf = {"workspace": Own(900, 64)} if workspace else {}
    k._dev = SimpleNamespace(driver=Driver(), stream=SimpleNamespace(handle="own"))
    k._lock = threading.Lock()
    return k


@pytest.fixture
def launches(monkeypatch):
    seen = []
    monkeypatch.setattr("cuda.core.launch", lambda stream, config, kernel, *args: seen.append((stream, args)))
    monkeypatch.setattr(runtime, "foreign_stream", lambda h: SimpleNamespace(handle=h))
    return seen


def test_pointers_and_stream_reach_the_launch(launches):
    k = _kernel()
    dev = k._dev
    k.launch_on({"a": 100, "b": 200, "out": 300}, 7)
    stream, args = launches[0]
    assert stream.handle == 7
    assert [int(x) for x in args] == [100, 200, 300, 900, 5]
    assert k._dev is dev and not k._borrowing and set(k._dbuf) == {"workspace"}


def test_scratch_is_ordered_across_streams(launches):
    k = _kernel()
    d = k._dev.driver
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    names = [c[0] for c in d.calls]
    # first: after the legacy stream (where the scratch was zeroed), then recorded on the caller's stream
    assert names == ["cuEventCreate", "cuEventRecord", "cuStreamWaitEvent", "cuEventRecord"]
    assert d.calls[1][2] == 0 and d.calls[2][1] == 7 and d.calls[3][2] == 7
    d.calls.clear()
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)  # the same stream: already in order
    assert [c[0] for c in d.calls] == ["cuEventRecord"]
    d.calls.clear()
    k.launch_on({"a": 1, "b": 2, "out": 3}, 9)  # another stream waits for the last launch
    assert [c[0] for c in d.calls] == ["cuStreamWaitEvent", "cuEventRecord"] and d.calls[0][1] == 9


def test_no_scratch_no_events(launches):
    k = _kernel(workspace=False)
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    assert k._dev.driver.calls == [] and len(launches) == 1


class Prepared(runtime.CudaKernel):
    """A subclass that prepares in upload, as the Hopper kernels do (pointers read, semaphores zeroed)."""

    def upload(self, inputs):
        super().upload(inputs)
        self.seen = int(self._dbuf["a"].ptr), int(self._dbuf["out"].ptr)
        self._dev.driver.cuMemsetD8(self._dbuf["workspace"].ptr, 0, 64)


def test_a_subclass_prepares_over_the_callers_pointers(launches):
    k = _kernel(Prepared)
    k.launch_on({"a": 11, "b": 22, "out": 33}, 5)
    assert k.seen == (11, 33)
    memsets = [c for c in k._dev.driver.calls if c[0].startswith("cuMemset")]
    assert memsets == [("cuMemsetD8Async", 900, 0, 64, 5)]  # on the caller's stream, not the legacy one


def test_wrong_buffers_are_refused(launches):
    k = _kernel()
    with pytest.raises(BadInputError, match="launch_on"):
        k.launch_on({"a": 1, "out": 3}, 7)
    assert not launches and not k._borrowing


def test_borrowed_buffers_refuse_copies():
    b = runtime._Borrowed(5, 8)
    with pytest.raises(Exception, match="never copied"):
        b.upload(np.zeros(2, np.float32))


def test_capture_orders_nothing_across_streams(launches):
    """Inside a CUDA graph capture no event from outside is waited on, nor one recorded for later launches."""
    k = _kernel()
    d = k._dev.driver
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    order = k._order
    d.calls.clear()
    d.capturing = True
    k.launch_on({"a": 1, "b": 2, "out": 3}, 9)
    assert d.calls == [] and len(launches) == 2 and launches[1][0].handle == 9
    assert k._order == order  # the next launch outside the capture still waits for the last one outside it
    d.capturing = False
    k.launch_on({"a": 1, "b": 2, "out": 3}, 11)
    assert [c[0] for c in d.calls] == ["cuStreamWaitEvent", "cuEventRecord"] and d.calls[0][1] == 11


class Counting(Prepared):
    uploads = 0

    def upload(self, inputs):
        super().upload(inputs)
        if self._borrowing:
            self.uploads += 1


def test_prepared_arguments_are_reused_only_for_the_same_stream_and_pointers(launches):
    k = _kernel(Counting)
    ptrs = {"a": 11, "b": 22, "out": 33}
    k.launch_on(ptrs, 5)
    k.launch_on(dict(ptrs), 5)
    assert k.uploads == 1 and len(launches) == 2 and k.seen == (11, 33)
    k.launch_on({**ptrs, "out": 44}, 5)
    assert k.uploads == 2 and k.seen == (11, 44)
    k.launch_on({**ptrs, "out": 44}, 6)  # another stream: prepared again (memsets go onto that stream)
    assert k.uploads == 3
    with pytest.raises(BadInputError):  # an upload of the object's own buffers (no arrays here: refused) ...
        runtime.CudaKernel.upload(k, {})
    assert k._on_key is None  # ... first forgets the caller's pointers, so the next launch_on prepares again
    k.launch_on({**ptrs, "out": 44}, 6)
    assert k.uploads == 4


def test_tensor_maps_are_encoded_once_per_key(monkeypatch):
    """tma.cached_map: the same key (address and geometry) gives the same map without encoding again; the
    table keeps at most MAP_CACHE maps, the least recently used leaving first."""
    from tracea.emitters.cuda import tma

    monkeypatch.setattr(tma, "_MAPS", type(tma._MAPS)())
    monkeypatch.setattr(tma, "MAP_CACHE", 2)
    made = []

    def enc(tag):
        return lambda: made.append(tag) or tma._Map()

    a = tma.cached_map(("t", 16), enc("a"))
    assert tma.cached_map(("t", 16), enc("again")) is a and made == ["a"]
    b = tma.cached_map(("t", 32), enc("b"))
    assert b is not a
    tma.cached_map(("t", 16), enc("x"))  # touched: now the most recent
    tma.cached_map(("t", 48), enc("c"))  # evicts ("t", 32)
    assert list(tma._MAPS) == [("t", 16), ("t", 48)]
    assert tma.cached_map(("t", 32), enc("b2")) is not b and made == ["a", "b", "c", "b2"]
