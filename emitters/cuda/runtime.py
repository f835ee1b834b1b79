"""Loading a cubin through cuda-core, launching it on NumPy arrays, and timing it with CUDA events.

``CudaKernel(inputs, out)`` is synchronous with host arrays in and out (copies included).
``CudaKernel.launch_on(ptrs, stream)`` launches on the caller's device buffers and stream (``tracea.ops`` on
CUDA tensors): no copy, no host synchronisation.
``CudaKernel.time`` keeps the inputs on the device, flushes L2 before each run (a memset over a buffer
twice the L2 size, outside the timed interval) and times each launch alone between two events.
Device memory is taken with plain allocations (cuMemAlloc), never managed memory.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, LaunchError, UnsupportedError

from ..cpu.runtime import Artifact  # the same record for every backend (language="cuda", binary: the cubin)
from ..timing import Timing, _p95
from .render import Rendered

BUFFERS = ("a", "b", "x", "weight", "bias", "residual", "out")
FLOAT_SCALARS = ("alpha",)


def _check(result: Any, what: str) -> Any:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise LaunchError(f"{what} failed: {err}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


# GPU cycles the stream sleeps before each timed call (~250 µs at H100 clocks). PyTorch's dispatch of one
# op costs tens of microseconds of host time, cuDNN's up to ~100; when the GPU finishes an iteration
# (flush, hold, start, op, end) before the host has queued the next, it idles wherever the host is, often
# between the start event and the op, and that idle time is counted (an H100, 2026-11-25: with no hold
# 60 of 79 suite rows spread, cuDNN p95/p50 up to 7; with a 100 µs hold 20 rows, all cuDNN at batch 1, up
# to 10). A hold longer than the host's time per iteration keeps the queue ahead of the GPU, so only the
# op is timed, Tracea's launches and the vendor's alike.
HOLD_CYCLES = 500_000


HOLD_SOURCE = r"""extern "C" __global__ void tracea_hold(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


class _Device:
    """The current GPU's context, one stream, and an L2-sized scratch buffer (process-wide)."""

    _lock = threading.Lock()
    _inst: _Device | None = None

    def __init__(self) -> None:
        from cuda.bindings import driver
        from cuda.core import Device

        try:
            self.dev = Device()
            self.dev.set_current()
        except Exception as exc:  # noqa: BLE001 - no driver / no device surface as several types
            raise UnsupportedError(f"no CUDA device to run on ({exc})",
                                   "`tracea emit --backend cuda --arch sm_90a` compiles without one") from None
        self.driver = driver
        self.stream = self.dev.create_stream()
        self.l2 = int(getattr(self.dev.properties, "l2_cache_size", 0) or 64 << 20)
        self.flush_bytes = 2 * self.l2
        self.flush_ptr = _check(driver.cuMemAlloc(self.flush_bytes), "cuMemAlloc")
        self._hold: Any = None  # the hold kernel, compiled on first use
        self.arrays: weakref.WeakSet[DeviceArray] = weakref.WeakSet()  # live buffers, freed at exit (close)

    @classmethod
    def get(cls) -> _Device:
        with cls._lock:
            if cls._inst is None:
                cls._inst = _Device()
                atexit.register(cls._inst.close)
            cls._inst.dev.set_current()
            return cls._inst

    def close(self) -> None:
        """Free the device memory still held at exit (the flush buffer, buffers of kernels still alive),
        before the context goes: nothing is left for the driver to reclaim (compute-sanitizer's leak check)."""
        try:
            self.dev.set_current()
            for a in list(self.arrays):
                a.free()
            if self.flush_ptr is not None:
                self.driver.cuMemFree(self.flush_ptr)
                self.flush_ptr = None
        except Exception:  # noqa: BLE001 - a driver already gone at exit
            pass

    def flush_l2(self) -> None:
        d = self.driver
        _check(d.cuMemsetD8Async(self.flush_ptr, 0, self.flush_bytes, self.stream.handle), "cuMemsetD8Async")

    def hold(self, cycles: int) -> None:
        """Keep the stream busy for ``cycles`` GPU clocks (one thread spinning on clock64), so the host can
        queue the start event and the launch behind it before the GPU reaches them: the interval between
        the events is then the kernel alone, never host time (HOLD_CYCLES)."""
        from cuda.core import LaunchConfig, ObjectCode, launch

        if self._hold is None:
            from .compiler import compile_cached

            cc = self.dev.compute_capability
            cubin = compile_cached(HOLD_SOURCE, "tracea_hold", "tracea_hold", f"sm_{cc[0]}{cc[1]}")[0]
            self._hold = ObjectCode.from_cubin(cubin.read_bytes()).get_kernel("tracea_hold")
        launch(self.stream, LaunchConfig(grid=1, block=1), self._hold, np.int64(cycles))


class DeviceArray:
    def __init__(self, dev: _Device, nbytes: int) -> None:
        self.dev = dev
        self.nbytes = nbytes
        self.ptr = _check(dev.driver.cuMemAlloc(max(1, nbytes)), "cuMemAlloc")
        dev.arrays.add(self)

    def upload(self, host: np.ndarray) -> None:
        _check(self.dev.driver.cuMemcpyHtoD(self.ptr, np.ascontiguousarray(host), host.nbytes), "cuMemcpyHtoD")

    def download(self, host: np.ndarray) -> None:
        _check(self.dev.driver.cuMemcpyDtoH(host, self.ptr, host.nbytes), "cuMemcpyDtoH")

    def free(self) -> None:
        ptr, self.ptr = self.ptr, None
        if ptr is not None:
            self.dev.driver.cuMemFree(ptr)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def pack_args(params: Any, buffers: tuple[str, ...], floats: tuple[str, ...], dbuf: dict[str, DeviceArray],
              scalars: dict[str, Any]) -> list[Any]:
    """Launch arguments for ``params`` in order: a device pointer for each of ``buffers`` (0 where none is
    allocated: an optional input), fp32 for ``floats``, int32 for the other scalars."""
    args: list[Any] = []
    for p in params:
        if p in buffers:
            buf = dbuf.get(p)
            args.append(np.uint64(int(buf.ptr) if buf is not None else 0))
        elif p in floats:
            args.append(np.float32(scalars[p]))
        else:
            args.append(np.int32(scalars[p]))
    return args


def event_timing(dev: _Device, launch: Any, warmup: int, repeats: int, flush_l2: bool = True,
                 hold_cycles: int | None = None) -> Timing:
    """Median and p95 of ``repeats`` calls of ``launch`` (after ``warmup``) on ``dev``'s stream, each between
    two CUDA events, the L2 flushed and the stream held busy before the start event: the conditions every
    CUDA kernel object and the vendor baseline are timed under."""
    import statistics

    from cuda.core import EventOptions

    hold = HOLD_CYCLES if hold_cycles is None else hold_cycles
    stream = dev.stream
    for _ in range(warmup):
        launch()
    opts = EventOptions(timing_enabled=True)
    pairs = []
    for _ in range(repeats):
        if flush_l2:
            dev.flush_l2()
        if hold:
            dev.hold(hold)
        start = stream.record(options=opts)
        launch()
        end = stream.record(options=opts)
        pairs.append((start, end))
    stream.sync()
    ms = sorted(float(e - s) for s, e in pairs)
    return Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))


class _Borrowed:
    """A caller's device buffer in ``launch_on``: its pointer and size; never freed, copied into or out of."""

    __slots__ = ("ptr", "nbytes")

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr, self.nbytes = ptr, nbytes

    def upload(self, host: np.ndarray) -> None:
        raise LaunchError("launch_on: a caller's buffer is never copied into", "pass host arrays to kernel(...)")

    download = upload


class _StreamDriver:
    """The driver module as one ``launch_on`` sees it: a memset a kernel object issues while it prepares
    (split-K semaphores) is queued on the caller's stream, in order with its launches, not on the legacy
    stream that a non-blocking stream does not wait for."""

    def __init__(self, driver: Any, handle: Any) -> None:
        self._driver, self._handle = driver, handle

    def cuMemsetD8(self, ptr: Any, value: int, nbytes: int) -> Any:  # noqa: N802 - the driver's name
        return self._driver.cuMemsetD8Async(ptr, value, nbytes, self._handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._driver, name)


class _OnStream:
    """The device as one ``launch_on`` sees it: the caller's stream in place of Tracea's own."""

    def __init__(self, dev: _Device, stream: Any) -> None:
        self._real, self.stream = dev, stream
        self.driver = _StreamDriver(dev.driver, stream.handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


_STREAMS: dict[int, Any] = {}


def _event(driver: Any) -> Any:
    return _check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")


def _capturing(driver: Any, handle: Any) -> bool:
    """Whether ``handle``'s stream is capturing a CUDA graph. Then launch_on orders nothing across streams:
    an event from outside the capture may not be waited on inside it (CUDA_ERROR_STREAM_CAPTURE_ISOLATION),
    and work before the capture is complete (torch.cuda.graph synchronizes as it begins)."""
    status = _check(driver.cuStreamIsCapturing(handle), "cuStreamIsCapturing")
    return status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def foreign_stream(handle: int) -> Any:
    """A cuda-core Stream for a caller's CUstream handle (an int: 0 is the legacy default stream, 2 the
    per-thread one), not owned: the caller keeps it alive."""
    from cuda import core

    s = _STREAMS.get(handle)
    if s is None:
        special = {0: "LEGACY_DEFAULT_STREAM", 1: "LEGACY_DEFAULT_STREAM", 2: "PER_THREAD_DEFAULT_STREAM"}
        s = getattr(core, special[handle]) if handle in special else core.Stream.from_handle(handle)
        _STREAMS[handle] = s
    return s


class CudaKernel:
    """A compiled kernel for one operation on the current GPU."""

    _borrowing = False  # inside launch_on: upload prepares the launch over the caller's buffers, copies nothing
    _order: tuple[Any, int] | None = None  # launch_on's (event, stream) after the last launch that used scratch
    _on_key: tuple[int, ...] | None = None  # launch_on's (stream, pointers) that the launch arguments were made for
    _sizes: dict[str, int] | None = None  # launch_on's buffer sizes in bytes, names sorted

    def __init__(self, op: Any, artifact: Artifact, rendered: Rendered, scalars: dict[str, float | int]) -> None:
        from cuda.core import LaunchConfig, ObjectCode

        self.op = op
        self.artifact = artifact
        self.rendered = rendered
        self._dev = _Device.get()
        try:
            obj = ObjectCode.from_cubin(artifact.binary)
            self._kernel = obj.get_kernel(rendered.entry)
        except Exception as exc:  # noqa: BLE001
            raise LaunchError(f"cannot load {artifact.binary}: {exc}",
                              "delete the file (a cache entry) and build again; a cubin for another GPU "
                              "does not load here") from None
        if rendered.smem > 48 * 1024:
            self._allow_smem(rendered.smem)
        self._driver_resources()
        self._config = LaunchConfig(grid=rendered.grid, block=rendered.block, shmem_size=rendered.smem)
        self._scalars = scalars
        self._shapes = {k: tuple(v) for k, v in op.shapes().items()}
        self._dtype = op.dtype.storage
        self._out_shape = tuple(op.output_shape())
        self._dbuf: dict[str, DeviceArray] = {}
        self._lock = threading.Lock()
        if "workspace" in rendered.params and rendered.metadata.get("workspace_bytes"):
            # a kernel's own scratch (the SIMT K split's partials and arrival counters): zeroed once here;
            # each launch leaves its counters at zero again
            ws = self._buffer("workspace", int(rendered.metadata["workspace_bytes"]))
            _check(self._dev.driver.cuMemsetD8(ws.ptr, 0, ws.nbytes), "cuMemsetD8")

    def _driver_resources(self) -> None:
        """The loaded binary's own figures (cuFuncGetAttribute) beside ptxas's, and in place of them where
        the compile log had none (seen once on an H200 with NVRTC 13.0, cause not established)."""
        res = self.artifact.metadata.get("resources")
        if not isinstance(res, dict):
            return
        try:
            attrs = self._kernel.attributes

            def get(name: str) -> int:
                v = getattr(attrs, name)
                return int(v() if callable(v) else v)

            drv = {"num_regs": get("num_regs"), "local_size_bytes": get("local_size_bytes"),
                   "shared_size_bytes": get("shared_size_bytes")}
        except Exception:  # noqa: BLE001 - an older cuda-core without these attributes
            return
        res["driver"] = drv
        if not res.get("regs_per_thread"):
            res["regs_per_thread"] = drv["num_regs"]
            res["source"] = "driver kernel attributes (the ptxas log had no figures)"

    def _allow_smem(self, nbytes: int) -> None:
        d = self._dev.driver
        attr = d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        handle = self._kernel._handle if hasattr(self._kernel, "_handle") else self._kernel.handle
        if isinstance(handle, d.CUkernel):
            res = d.cuKernelSetAttribute(attr, nbytes, handle, self._dev.dev.device_id)
        else:
            res = d.cuFuncSetAttribute(handle, attr, nbytes)
        _check(res, f"allowing {nbytes} B of dynamic shared memory")

    # -------------------------------------------------------------- buffers
    def _buffer(self, name: str, nbytes: int) -> DeviceArray:
        buf = self._dbuf.get(name)
        if buf is None or buf.nbytes != nbytes:
            buf = self._dbuf[name] = DeviceArray(self._dev, nbytes)
        return buf

    def _check_inputs(self, inputs: Any) -> dict[str, np.ndarray]:
        if not hasattr(inputs, "keys"):
            raise BadInputError(f"inputs: expected a dict of arrays ({', '.join(self._shapes)})")
        out = {}
        for name, shape in self._shapes.items():
            x = inputs.get(name)
            if not isinstance(x, np.ndarray):
                raise BadInputError(f"inputs: missing {name!r} (expected {', '.join(self._shapes)})")
            if x.shape != shape or x.dtype != self._dtype:
                raise BadInputError(f"inputs[{name!r}]: {x.shape} {x.dtype}, expected {shape} {self._dtype}")
            out[name] = np.ascontiguousarray(x)
        return out

    def upload(self, inputs: dict[str, np.ndarray]) -> None:
        if self._borrowing:  # launch_on: the buffers are the caller's; a subclass's upload then reads their pointers
            return
        self._on_key = None  # the launch arguments now point at this object's own buffers
        for name, x in self._check_inputs(inputs).items():
            self._buffer(name, x.nbytes).upload(x)
        self._buffer("out", int(np.prod(self._out_shape)) * self._dtype.itemsize)

    def _args(self) -> list[Any]:
        return pack_args(self.rendered.params, (*BUFFERS, "workspace"), FLOAT_SCALARS, self._dbuf, self._scalars)

    def launch(self) -> None:
        """One launch on the device-resident buffers (asynchronous)."""
        from cuda.core import launch

        launch(self._dev.stream, self._config, self._kernel, *self._args())

    # -------------------------------------------------------------- calls
    def launch_on(self, ptrs: dict[str, int], stream: int) -> None:
        """One launch on the caller's device memory, queued on the caller's stream (a CUstream handle as an
        int, e.g. ``torch.cuda.current_stream().cuda_stream``); returns at once: no copy, no host sync.

        ``ptrs``: a device pointer for each of the op's inputs (``op.shapes()``) and "out", each a dense
        C-contiguous buffer of the op's shape and dtype on this kernel's GPU, alive until the stream has run
        the launch. A subclass's ``upload`` prepares its arguments (tensor maps, ...) over these pointers.
        The kernel's own scratch (split-K workspace, padded copies, tile plans) is shared by its launches, so a
        launch on another stream than the last first waits for that one (an event, no host sync), except
        while the stream captures a CUDA graph. The arguments (tensor maps) made for the last call's stream and
        pointers are reused when both repeat, as they do in a model's steady state under torch's allocator."""
        if self._sizes is None:  # once: the buffers' byte sizes, by name in sorted order
            item = self._dtype.itemsize
            sizes = {n: int(np.prod(s)) * item for n, s in self._shapes.items()} | {
                "out": int(np.prod(self._out_shape)) * item}
            self._sizes = dict(sorted(sizes.items()))
        sizes, handle = self._sizes, int(stream)
        names = sizes.keys()
        if not hasattr(ptrs, "keys") or set(ptrs) != names:
            got = sorted(ptrs) if hasattr(ptrs, "keys") else type(ptrs).__name__
            raise BadInputError(f"launch_on: expected pointers for {', '.join(names)}, got {got}")
        key = (handle, *(int(ptrs[n]) for n in names))
        with self._lock:
            saved_dbuf, saved_dev = self._dbuf, self._dev
            own = {n: b for n, b in saved_dbuf.items() if n not in names}
            on = _OnStream(saved_dev, foreign_stream(handle))
            capturing = _capturing(saved_dev.driver, on.stream.handle)
            if not capturing:
                self._wait_for_scratch(on, own)
            try:
                self._dbuf = {**own, **{n: _Borrowed(int(ptrs[n]), sizes[n]) for n in names}}
                self._dev, self._borrowing = on, True  # type: ignore[assignment]
                if key != self._on_key:  # the same buffers and stream as the last launch_on: its arguments hold
                    self._on_key = None
                    self.upload({})
                    self._on_key = key
                self.launch()
            finally:
                scratch = {n: b for n, b in self._dbuf.items() if not isinstance(b, _Borrowed)}
                self._dev, self._borrowing = saved_dev, False
                self._dbuf = {**{n: b for n, b in saved_dbuf.items() if n in names}, **scratch}
            if scratch and not capturing:
                event = self._order[0] if self._order else _event(saved_dev.driver)
                self._order = (event, int(on.stream.handle))
                _check(saved_dev.driver.cuEventRecord(event, on.stream.handle), "cuEventRecord")

    def _wait_for_scratch(self, on: _OnStream, own: dict[str, Any]) -> None:
        """Order this launch after the last one that used the kernel's scratch, when that ran on another
        stream (the first time: after the legacy stream, where the scratch was zeroed and filled)."""
        if not own:
            return
        d = on._real.driver
        if self._order is None:
            event = _event(d)
            _check(d.cuEventRecord(event, d.CUstream(0)), "cuEventRecord")
            self._order = (event, 0)
        event, last = self._order
        if last != int(on.stream.handle):
            _check(d.cuStreamWaitEvent(on.stream.handle, event, 0), "cuStreamWaitEvent")

    def __call__(self, inputs: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        given = out is not None
        if out is None:
            out = np.empty(self._out_shape, dtype=self._dtype)
        elif not isinstance(out, np.ndarray) or out.shape != self._out_shape or out.dtype != self._dtype \
                or not out.flags.c_contiguous:
            raise BadInputError(f"out: expected a C-contiguous {self._out_shape} {self._dtype} array")
        with self._lock:
            self.upload(inputs)
            if given:  # the caller's contents (a poison such as NaN) reach the device: unwritten elements show
                self._dbuf["out"].upload(out)
            self.launch()
            self._dev.stream.sync()
            self._dbuf["out"].download(out)
        return out

    def time(self, inputs: dict[str, np.ndarray], warmup: int = 3, repeats: int = 20,
             flush_l2: bool = True, hold_cycles: int | None = None) -> Timing:
        """Median and p95 of ``repeats`` launches, each between two CUDA events, L2 flushed before each and
        the stream held busy before the start event (as the vendor baseline is: the same conditions)."""
        with self._lock:
            self.upload(inputs)
            return event_timing(self._dev, self.launch, warmup, repeats, flush_l2, hold_cycles)

    def __repr__(self) -> str:
        return f"CudaKernel({self.artifact.name}, variant={self.artifact.variant})"
