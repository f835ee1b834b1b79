"""CudaKernel.launch_on / launch_ptrs without a GPU: a kernel object over recording stand-ins for libcuda
(launches.py) and the cuda-bindings driver. What it proves: the caller's pointers reach the launch arguments,
nothing is copied, the kernel's own scratch is kept and ordered by events across streams (not while a graph
is captured), a subclass's memset goes onto the caller's stream, the launch is prepared once per set of
pointers and its recorded driver calls are replayed on whatever stream the next call gives, and the object
is restored afterwards. The real launches are tests/ops/test_ops_gpu.py's."""

from __future__ import annotations

import ctypes
import threading
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("cuda.core")

from tracea.doctor.errors import BadInputError, LaunchError  # noqa: E402
from tracea.emitters import graph_held  # noqa: E402
from tracea.emitters.cuda import launches, runtime  # noqa: E402
from tracea.kernels import Gemm  # noqa: E402


class Driver:
    """cuda-bindings' driver as a preparation uses it (the memsets a subclass issues)."""

    def __init__(self):
        self.calls = []

    @staticmethod
    def CUstream(h):  # noqa: N802 - the driver's name
        return int(h)

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, *args))
            return (0,)
        return call


class Cuda:
    """libcuda as launches.py calls it: each launch's function, stream and arguments (read back from the
    parameter array: four pointers, then an int), and the ordering calls."""

    def __init__(self):
        self.launched, self.order, self.capturing, self.fail = [], [], False, 0

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        if self.fail:
            return self.fail
        addrs = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        args = [ctypes.c_uint64.from_address(addrs[i]).value for i in range(4)]
        args.append(ctypes.c_int32.from_address(addrs[4]).value)
        self.launched.append((func, stream, args))
        return 0


@pytest.fixture
def cuda(monkeypatch):
    fake = Cuda()
    monkeypatch.setattr(launches, "lib", lambda: fake)
    monkeypatch.setattr(launches, "error_name", lambda rc: f"error {rc}")
    made = iter(range(100, 200))
    monkeypatch.setattr(launches, "event", lambda: next(made))
    monkeypatch.setattr(launches, "record", lambda ev, s: fake.order.append(("record", ev, s)))
    monkeypatch.setattr(launches, "wait", lambda s, ev: fake.order.append(("wait", s, ev)))
    monkeypatch.setattr(launches, "capturing", lambda s: fake.capturing)
    return fake


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
    k.rendered = SimpleNamespace(params=("a", "b", "out", "workspace", "m"), smem=0)
    k._scalars = {"m": 5}
    k._func, k._grid3, k._block3 = 77, (1, 1, 1), (128, 1, 1)
    k._dbuf = {"workspace": Own(900, 64)} if workspace else {}
    k._dev = SimpleNamespace(driver=Driver(), stream=SimpleNamespace(handle=1234))
    k._lock = threading.Lock()
    return k


def test_pointers_and_stream_reach_the_launch(cuda):
    k = _kernel()
    dev = k._dev
    k.launch_on({"a": 100, "b": 200, "out": 300}, 7)
    assert cuda.launched == [(77, 7, [100, 200, 300, 900, 5])]
    assert k._dev is dev and not k._borrowing and set(k._dbuf) == {"workspace"}
    assert k.ptr_names == ("a", "b", "out")
    k.launch_ptrs((101, 201, 301), 8)  # the tuple form, in ptr_names order
    assert cuda.launched[-1] == (77, 8, [101, 201, 301, 900, 5])


def test_scratch_is_ordered_across_streams(cuda):
    k = _kernel()
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    # first: after Tracea's stream (1234, where the scratch was zeroed), itself after the legacy stream, then
    # recorded on the caller's stream
    assert cuda.order == [("record", 100, 0), ("wait", 1234, 100), ("record", 101, 1234), ("wait", 7, 101),
                          ("record", 101, 7)]
    cuda.order.clear()
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)  # the same stream: already in order
    assert cuda.order == [("record", 101, 7)]
    cuda.order.clear()
    k.launch_on({"a": 1, "b": 2, "out": 3}, 9)  # another stream waits for the last launch
    assert cuda.order == [("wait", 9, 101), ("record", 101, 9)]


def test_no_scratch_no_events(cuda):
    k = _kernel(workspace=False)
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    assert cuda.order == [] and len(cuda.launched) == 2


class Prepared(runtime.CudaKernel):
    """A subclass that prepares in upload, as the Hopper kernels do (pointers read, semaphores zeroed)."""

    def upload(self, inputs):
        super().upload(inputs)
        self.seen = int(self._dbuf["a"].ptr), int(self._dbuf["out"].ptr)
        self._dev.driver.cuMemsetD8(self._dbuf["workspace"].ptr, 0, 64)


def test_a_subclass_prepares_over_the_callers_pointers(cuda):
    k = _kernel(Prepared)
    k.launch_on({"a": 11, "b": 22, "out": 33}, 5)
    assert k.seen == (11, 33)
    memsets = [c for c in k._dev.driver.calls if c[0].startswith("cuMemset")]
    assert memsets == [("cuMemsetD8Async", 900, 0, 64, 5)]  # on the caller's stream, not the legacy one


def test_wrong_buffers_are_refused(cuda):
    k = _kernel()
    with pytest.raises(BadInputError, match="launch_on"):
        k.launch_on({"a": 1, "out": 3}, 7)
    assert not cuda.launched and not k._borrowing


def test_borrowed_buffers_refuse_copies():
    b = runtime._Borrowed(5, 8)
    with pytest.raises(Exception, match="never copied"):
        b.upload(np.zeros(2, np.float32))


def test_capture_orders_nothing_across_streams(cuda):
    """Inside a CUDA graph capture no event from outside is waited on, nor one recorded for later launches."""
    k = _kernel()
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    order = k._order
    cuda.order.clear()
    cuda.capturing = True
    k.launch_on({"a": 1, "b": 2, "out": 3}, 9)
    assert cuda.order == [] and len(cuda.launched) == 2 and cuda.launched[1][1] == 9
    assert k._order == order  # the next launch outside the capture still waits for the last one outside it
    cuda.capturing = False
    k.launch_on({"a": 1, "b": 2, "out": 3}, 11)
    assert cuda.order == [("wait", 11, 101), ("record", 101, 11)]


class Counting(Prepared):
    uploads = 0

    def upload(self, inputs):
        super().upload(inputs)
        if self._borrowing:
            self.uploads += 1


def test_a_launch_is_prepared_once_per_set_of_pointers_and_replayed_on_any_stream(cuda):
    k = _kernel(Counting)
    ptrs = {"a": 11, "b": 22, "out": 33}
    k.launch_on(ptrs, 5)
    k.launch_on(dict(ptrs), 5)
    assert k.uploads == 1 and len(cuda.launched) == 2 and k.seen == (11, 33)
    k.launch_on({**ptrs, "out": 44}, 5)
    assert k.uploads == 2 and k.seen == (11, 44) and cuda.launched[-1][2][:3] == [11, 22, 44]
    k.launch_on({**ptrs, "out": 44}, 6)  # another stream: the recorded calls replayed there, nothing prepared
    assert k.uploads == 2 and cuda.launched[-1][:2] == (77, 6) and cuda.launched[-1][2][:3] == [11, 22, 44]
    with pytest.raises(BadInputError):  # an upload of the object's own buffers (no arrays here: refused) ...
        runtime.CudaKernel.upload(k, {})
    assert k._tapes is None  # ... first forgets the caller's pointers, so the next launch_on prepares again
    k.launch_on({**ptrs, "out": 44}, 6)
    assert k.uploads == 3


def test_layers_that_share_a_kernel_each_keep_their_recorded_launch(cuda, monkeypatch):
    """A model's layers of one shape share the kernel object, each on its own tensors: alternating between
    them replays each one's tape; past TAPES sets of pointers the least recently used is prepared again."""
    monkeypatch.setattr(runtime, "TAPES", 2)
    k = _kernel(Counting)
    one, two, three = (1, 2, 3), (4, 5, 6), (7, 8, 9)
    for _ in range(3):
        k.launch_ptrs(one, 5)
        k.launch_ptrs(two, 5)
    assert k.uploads == 2 and [c[2][:3] for c in cuda.launched] == [list(one), list(two)] * 3
    k.launch_ptrs(three, 5)  # a third set: the least recently used (one) leaves
    k.launch_ptrs(two, 5)
    assert k.uploads == 3
    k.launch_ptrs(one, 5)
    assert k.uploads == 4 and cuda.launched[-1][2][:3] == list(one)


def test_a_failed_launch_is_a_launch_error_and_is_not_replayed(cuda):
    k = _kernel(workspace=False)
    cuda.fail = 700  # CUDA_ERROR_ILLEGAL_ADDRESS
    with pytest.raises(LaunchError, match="error 700"):
        k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    assert not k._tapes  # nothing recorded: the next call prepares again
    cuda.fail = 0
    k.launch_on({"a": 1, "b": 2, "out": 3}, 7)
    assert cuda.launched == [(77, 7, [1, 2, 3, 0, 5])]


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


class MakesScratch(runtime.CudaKernel):
    """A kernel whose preparation makes its scratch (a padded copy's buffer, split-K's semaphores)."""

    def upload(self, inputs):
        super().upload(inputs)
        if "pad" not in self._dbuf:
            self._dbuf["pad"] = Own(950, 32)


def test_a_first_launch_inside_a_capture_records_no_event(cuda):
    """Scratch made by the first preparation, inside a capture: the capture is asked after the preparation,
    and no event is recorded in it (a later launch outside would wait on a captured event)."""
    k = _kernel(MakesScratch, workspace=False)
    cuda.capturing = True
    k.launch_ptrs((1, 2, 3), 7)
    assert cuda.order == [] and k._order is None and k._has_scratch
    cuda.capturing = False
    k.launch_ptrs((1, 2, 3), 9)  # outside: after Tracea's stream (and the legacy one), then recorded on this one
    assert cuda.order == [("record", 100, 0), ("wait", 1234, 100), ("record", 101, 1234), ("wait", 9, 101),
                          ("record", 101, 9)]


class Zeroing(runtime.CudaKernel):
    """A kernel whose preparation asks for a buffer that must start at zero (split-K's semaphores)."""

    def upload(self, inputs):
        super().upload(inputs)
        self._zeroed("sem", 64)


def test_scratch_that_starts_at_zero_is_zeroed_once_not_per_preparation(cuda, monkeypatch):
    """A preparation for new pointers (a CUDA graph capture's private pool gives every tensor new ones) issues
    no memset for a buffer that already exists: a memset inside a capture becomes a node of every replay."""
    made = iter(range(5000, 6000, 100))
    monkeypatch.setattr(runtime, "DeviceArray", lambda dev, nbytes: Own(next(made), nbytes))
    k = _kernel(Zeroing, workspace=False)
    k.launch_ptrs((1, 2, 3), 5)
    k.launch_ptrs((4, 5, 6), 5)
    cuda.capturing = True
    k.launch_ptrs((7, 8, 9), 5)
    memsets = [c for c in k._dev.driver.calls if c[0].startswith("cuMemset")]
    assert memsets == [("cuMemsetD8Async", 5000, 0, 64, 5)] and len(cuda.launched) == 3
    del k._dbuf["sem"]  # a buffer made again (another size, say) is zeroed again
    k.launch_ptrs((10, 11, 12), 6)
    assert [c for c in k._dev.driver.calls if c[0].startswith("cuMemset")][-1] == ("cuMemsetD8Async", 5100, 0, 64, 6)


def test_a_prepared_call_replays_its_last_launch_and_never_a_stale_one(cuda, monkeypatch):
    """tracea.ops' prepared call keeps the last pointers and their tape (a kernel without scratch): the same
    pointers replay it without the kernel's lookup, new ones go through launch_ptrs, whose tape it keeps."""
    from tracea.ops import _prepared
    from tracea.ops._engine import Route

    k = _kernel(workspace=False)
    looked_up = []
    real = k.launch_ptrs
    monkeypatch.setattr(k, "launch_ptrs", lambda ptrs, s: looked_up.append(ptrs) or real(ptrs, s), raising=False)
    arrays = (SimpleNamespace(p=11), SimpleNamespace(p=22))
    outs = iter([33, 33, 44, 33])
    p = _prepared.Prepared(k, (0, 1, -1), (8, 8, 0), 8, lambda x: x.p, lambda arrays: SimpleNamespace(p=next(outs)),
                           lambda: 5, Route(op="gemm", path="tracea"), ("a", "b"))
    for _ in range(2):
        p(arrays, None)
    assert looked_up == [(11, 22, 33)] and [c[2][:3] for c in cuda.launched] == [[11, 22, 33]] * 2
    p(arrays, None)  # another out: a launch over the new pointers
    p(arrays, None)  # and back
    assert looked_up == [(11, 22, 33), (11, 22, 44), (11, 22, 33)]
    assert [c[2][:3] for c in cuda.launched][2:] == [[11, 22, 44], [11, 22, 33]]
    k2 = _kernel()  # with scratch of its own: every call through launch_ptrs, which orders the scratch
    assert k2.replayable((1, 2, 3)) is None


def test_a_kernel_whose_scratch_a_graph_captured_outlives_every_other_reference(cuda, monkeypatch):
    """A CUDA graph holds the addresses of a kernel's scratch, not the kernel: one captured is kept by the process
    (``tracea.ops.clear_cache()`` then dropping it must not free memory a replay writes). Kernels without scratch,
    and launches outside a capture, are not kept."""
    import gc
    import weakref

    monkeypatch.setattr(graph_held, "HELD", {})
    outside, plain, captured = _kernel(), _kernel(workspace=False), _kernel()
    outside.launch_ptrs((1, 2, 3), 7)
    cuda.capturing = True
    plain.launch_ptrs((1, 2, 3), 7)
    captured.launch_ptrs((1, 2, 3), 7)
    captured.launch_ptrs((4, 5, 6), 7)  # kept once however often it is captured
    cuda.capturing = False
    assert [k for k, _ in graph_held.HELD.values()] == [captured]
    refs = [weakref.ref(k) for k in (outside, plain, captured)]
    del outside, plain, captured
    gc.collect()
    assert [r() is None for r in refs] == [True, True, False]


def test_scratch_made_inside_a_capture_is_zeroed_for_the_graph_and_for_launches_outside_it(cuda, monkeypatch):
    """A buffer that must start at zero, first made while a graph captures: its memset on the capturing stream is
    a node of the graph (run at replays only), so the next launch outside the graph zeroes it on its own stream
    first, after that launch's wait for the last one that used the scratch; once."""
    made = iter(range(5000, 6000, 100))
    monkeypatch.setattr(runtime, "DeviceArray", lambda dev, nbytes: Own(next(made), nbytes))
    k = _kernel(Zeroing, workspace=False)
    raw = Driver()
    k._dev = SimpleNamespace(driver=runtime._StreamDriver(raw, 1234), stream=SimpleNamespace(handle=1234))
    k._order = (77, 5)  # an earlier launch outside any graph, on stream 5
    cuda.capturing = True
    k.launch_ptrs((1, 2, 3), 5)
    assert [c for c in raw.calls if c[0].startswith("cuMemset")] == [("cuMemsetD8Async", 5000, 0, 64, 5)]
    assert cuda.order == [] and len(k._unzeroed) == 1
    cuda.capturing = False
    k.launch_ptrs((1, 2, 3), 9)
    k.launch_ptrs((1, 2, 3), 9)
    assert [c for c in raw.calls if c[0].startswith("cuMemset")] == [("cuMemsetD8Async", 5000, 0, 64, 5),
                                                                      ("cuMemsetD8Async", 5000, 0, 64, 9)]
    assert cuda.order[:2] == [("wait", 9, 77), ("record", 77, 9)] and k._unzeroed == ()


def test_a_measurement_graph_lets_go_of_its_kernels_but_not_of_anyone_elses(cuda, monkeypatch):
    """``graph_held.measuring()``: the holds its thread makes inside are let go when it ends (the measurement's
    graph destroyed), unless the process holds the kernel too: held before, captured meanwhile by a user's graph
    in another thread, or captured again later."""
    monkeypatch.setattr(graph_held, "HELD", {})
    early, measured, shared, other = _kernel(), _kernel(), _kernel(), _kernel()
    cuda.capturing = True
    early.launch_ptrs((1, 2, 3), 7)
    with graph_held.measuring():
        for k in (early, measured, shared):
            k.launch_ptrs((1, 2, 3), 7)
        elsewhere = threading.Thread(target=lambda: (shared.launch_ptrs((4, 5, 6), 8), other.launch_ptrs((1, 2, 3), 8)))
        elsewhere.start()
        elsewhere.join()
        assert all(graph_held.held(k) for k in (early, measured, shared, other))
    assert [graph_held.held(k) for k in (early, measured, shared, other)] == [True, False, True, True]
    measured.launch_ptrs((4, 5, 6), 7)  # a capture outside any measurement: the process's
    assert graph_held.held(measured)
