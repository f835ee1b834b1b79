"""A kernel object's host copies and memsets go on its stream, in order with its launches (runtime.py's
``_StreamDriver``): cuda.core's stream is non-blocking, and the legacy stream's ``cuMemcpyHtoD`` returns before a
pageable copy lands, so an output's NaN poison once landed after the kernel's stores on a busy H200
(docs/device-runs/h200-conv1x1-swapped-operands/). Checked here against a recording stand-in for the driver
module, without a GPU."""

from __future__ import annotations

import numpy as np

from tracea.emitters.cuda import runtime


class RecordingDriver:
    """The driver calls the wrapper makes, by name and stream; everything else passes through."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def CUstream(self, handle: int) -> tuple:  # noqa: N802 - the driver's name
        return ("stream", handle)

    def __getattr__(self, name: str):
        def call(*args):
            self.calls.append((name, *args))
            return (0,)

        return call


def test_copies_and_memsets_are_queued_on_the_stream():
    drv = RecordingDriver()
    d = runtime._StreamDriver(drv, 0x5A)
    host = np.arange(8, dtype=np.float32)
    d.cuMemcpyHtoD(0x1000, host, host.nbytes)
    d.cuMemcpyDtoH(host, 0x1000, host.nbytes)
    d.cuMemsetD8(0x2000, 0, 64)
    d.cuModuleGetFunction("m", b"f")  # not a copy: the module's own call, unchanged
    assert [c[0] for c in drv.calls] == ["cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuStreamSynchronize",
                                         "cuMemsetD8Async", "cuModuleGetFunction"]
    assert all(c[-1] == ("stream", 0x5A) for c in drv.calls[:4])  # a download is done when it returns, pinned too


def test_a_device_array_uploads_and_downloads_on_its_device_stream():
    drv = RecordingDriver()

    class Dev:
        driver = runtime._StreamDriver(drv, 7)
        arrays = set()

    arr = runtime.DeviceArray.__new__(runtime.DeviceArray)
    arr.dev, arr.ptr, arr.nbytes = Dev(), 0x3000, 32
    host = np.zeros(8, dtype=np.float32)
    arr.upload(host)
    arr.download(host)
    assert [(c[0], c[-1]) for c in drv.calls] == [("cuMemcpyHtoDAsync", ("stream", 7)),
                                                  ("cuMemcpyDtoHAsync", ("stream", 7)),
                                                  ("cuStreamSynchronize", ("stream", 7))]
    arr.ptr = None  # nothing to free


def test_an_array_made_in_a_callers_preparation_copies_on_the_devices_stream():
    """A buffer first made while a ``launch_ptrs`` preparation borrows the caller's stream keeps the device itself,
    so a later host call's copies into it are on Tracea's stream, in order with that call's launch."""
    drv = RecordingDriver()

    class Dev:
        driver = runtime._StreamDriver(drv, 3)
        arrays: set = set()

    on = runtime._OnStream(Dev(), 11)
    drv.cuMemAlloc = lambda n: (0, 0x4000)
    arr = runtime.DeviceArray(on, 16)
    assert arr.dev is on._real
    arr.upload(np.zeros(4, dtype=np.float32))
    assert drv.calls[-1][0] == "cuMemcpyHtoDAsync" and drv.calls[-1][-1] == ("stream", 3)
    arr.ptr = None


def test_the_device_and_a_callers_stream_both_wrap_the_module_itself():
    """``_OnStream`` (a ``launch_ptrs`` preparation) wraps the raw module on the caller's stream, not the device's
    wrapper, so its memsets go on the caller's stream."""
    drv = RecordingDriver()

    class Dev:
        driver = runtime._StreamDriver(drv, 1)

    on = runtime._OnStream(Dev(), 9)
    on.driver.cuMemsetD8(0x10, 0, 4)
    assert drv.calls == [("cuMemsetD8Async", 0x10, 0, 4, ("stream", 9))]
