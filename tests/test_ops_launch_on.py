"""CudaKernel.launch_on without a GPU: a kernel object over a recording stand-in for the driver and
cuda-core's launch. What it proves: the caller's pointers reach the launch arguments, nothing is copied, the
kernel's own scratch is kept and ordered by events across streams, a subclass's memset goes onto the
caller's stream, and the object is restored afterwards. The real launches are tests/test_ops_gpu.py's."""

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
        self.CUevent_flags = SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)

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
