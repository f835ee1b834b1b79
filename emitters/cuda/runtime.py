"""Loading a cubin through cuda-core, launching it on NumPy arrays, and timing it with CUDA events.

``CudaKernel(inputs, out)`` is synchronous with host arrays in and out (copies included).
``CudaKernel.launch_on(ptrs, stream)`` / ``launch_ptrs`` launch on the caller's device buffers and stream
(``tracea.ops`` on CUDA tensors): no copy, no host synchronisation, and a repeat on the same buffers replays
the recorded driver calls (``OnCallerBuffers``, launches.py).
``CudaKernel.time`` keeps the inputs on the device, flushes L2 before each run (a memset over twice the L2,
outside the timed interval), times each launch alone between two events. Memory: cuMemAlloc, never managed."""

from __future__ import annotations

import atexit
import collections
import threading
import weakref
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, LaunchError, UnsupportedError

from .. import graph_held
from ..artifact import Artifact  # the same record for every backend (language="cuda", binary: the cubin)
from ..timing import HOLD_CYCLES, Timing, _p95
from . import launches, modules
from .render import Rendered
from .stream_driver import Borrowed as _Borrowed
from .stream_driver import OnStream as _OnStream
from .stream_driver import StreamDriver as _StreamDriver

BUFFERS = ("a", "b", "x", "weight", "bias", "residual", "out", "scale_a", "scale_b")
FLOAT_SCALARS = ("alpha",)


def _check(result: Any, what: str) -> Any:
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise LaunchError(f"{what} failed: {err}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


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
        launches.CONTEXT[0] = int(_check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent"))
        self.stream = self.dev.create_stream()
        self.driver = _StreamDriver(driver, int(self.stream.handle))  # copies, memsets in order with launches
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
            from ..nvrtc import compile_cached

            cc = self.dev.compute_capability
            cubin = compile_cached(HOLD_SOURCE, "tracea_hold", "tracea_hold", f"sm_{cc[0]}{cc[1]}")[0]
            self._hold = ObjectCode.from_cubin(cubin.read_bytes()).get_kernel("tracea_hold")
        launch(self.stream, LaunchConfig(grid=1, block=1), self._hold, np.int64(cycles))


class DeviceArray:
    def __init__(self, dev: _Device, nbytes: int) -> None:
        self.dev = getattr(dev, "_real", dev)  # made in a launch_ptrs preparation: still Tracea's stream later
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


TAPES = 64  # recorded launches kept per kernel object (a model's layers of one shape, each on its own tensors)


class OnCallerBuffers:
    """Launching a kernel object on the caller's device memory and stream (``tracea.ops`` on CUDA tensors):
    no copy, no host synchronisation. A host class provides ``_shapes`` (the op's inputs), ``_out_shape``,
    ``_dtype``, ``_dbuf`` (its own buffers by name), ``_dev``, ``_lock``, ``launch()``, and an ``upload(inputs)``
    that, while ``_borrowing``, copies nothing and prepares its launch arguments (tensor maps, ...) over the
    pointers of ``_dbuf``.

    The first launch on a set of pointers prepares (``upload``) and records the driver calls it makes (a
    ``launches.Tape``, holding its own arguments); every later launch on the same pointers replays them on
    the given stream, which is all a repeated call costs. Tapes are kept per set of pointers (``TAPES`` of
    them, the least recently used leaving first): the layers of a model that share a kernel each keep
    theirs. The kernel's own scratch (split-K workspace, padded copies, tile plans) is
    shared by its launches, so a launch on another stream than the last first waits for that one (an event,
    no host sync), except while the stream captures a CUDA graph: then nothing from outside the capture may
    be waited on, and work before the capture is complete (torch.cuda.graph synchronizes as it begins). A
    kernel with scratch that a capture records is kept by the process from then on (``graph_held``): the graph
    holds the scratch's addresses, not the kernel, so ``tracea.ops.clear_cache()`` or a dropped kernel must not
    free the memory a later replay writes."""

    _borrowing = False  # inside a preparation: upload reads the caller's pointers, copies nothing
    _tapes: collections.OrderedDict[tuple[int, ...], launches.Tape] | None = None  # by pointers, newest last
    _order: tuple[int, int] | None = None  # (event, stream) recorded after the last launch that used scratch
    _has_scratch: bool | None = None  # the kernel holds buffers of its own (None: not known yet)
    _unzeroed: tuple[Any, ...] = ()  # buffers made inside a capture, zeroed only by its graph's memset so far
    _names: tuple[str, ...] | None = None
    _sizes: tuple[int, ...] | None = None

    @property
    def ptr_names(self) -> tuple[str, ...]:
        """The buffers ``launch_ptrs`` takes, in its order: the op's inputs and "out", sorted by name."""
        if self._names is None:
            item = self._dtype.itemsize
            shapes = {**self._shapes, "out": self._out_shape}  # type: ignore[attr-defined]
            self._names = tuple(sorted(shapes))
            op = self.op  # type: ignore[attr-defined]
            self._sizes = tuple(int(np.prod(shapes[n])) * (item if n == "out" else op.input_dtype(n).itemsize)
                                for n in self._names)
        return self._names

    def launch_on(self, ptrs: dict[str, int], stream: int) -> None:
        """One launch on the caller's device memory, queued on the caller's stream (a CUstream handle as an
        int, e.g. ``torch.cuda.current_stream().cuda_stream``); returns at once. ``ptrs``: a device pointer for
        each of the op's inputs (``op.shapes()``) and "out", each a dense C-contiguous buffer of the op's shape
        and dtype on this kernel's GPU, alive until the stream has run the launch."""
        names = self.ptr_names
        if not hasattr(ptrs, "keys") or set(ptrs) != set(names):
            got = sorted(ptrs) if hasattr(ptrs, "keys") else type(ptrs).__name__
            raise BadInputError(f"launch_on: expected pointers for {', '.join(names)}, got {got}")
        self.launch_ptrs(tuple(int(ptrs[n]) for n in names), int(stream))

    def launch_ptrs(self, ptrs: tuple[int, ...], stream: int) -> None:
        """``launch_on`` with the pointers as a tuple in ``ptr_names`` order (the prepared call's form)."""
        with self._lock:  # type: ignore[attr-defined]
            tapes = self._tapes
            tape = tapes.get(ptrs) if tapes is not None else None
            scratch = self._has_scratch
            if scratch is None or tape is None:
                scratch = any(n not in self.ptr_names for n in self._dbuf)  # type: ignore[attr-defined]
            capturing = launches.capturing(stream) if scratch else None
            if scratch and not capturing:
                self._wait_for_scratch(stream)
                if self._unzeroed:
                    self._zero_on(stream)
            if tape is not None:
                tape.replay(stream)
                if len(tapes) > 1:  # type: ignore[arg-type]
                    tapes.move_to_end(ptrs)  # type: ignore[union-attr]
            else:
                self._record(ptrs, stream)
            if self._has_scratch and capturing is None:  # scratch the preparation just made: asked now
                capturing = launches.capturing(stream)
            if self._has_scratch and capturing:
                graph_held.hold(self)
            if self._has_scratch and not capturing:
                ev = self._order[0] if self._order else launches.event()
                self._order = (ev, stream)
                launches.record(ev, stream)

    def replayable(self, ptrs: tuple[int, ...]) -> launches.Tape | None:
        """The recorded launch over ``ptrs`` when replaying it is the whole launch (a kernel without scratch of
        its own, so nothing to order across streams): a caller that repeats ``ptrs`` may replay it directly on
        any stream (``tracea.ops``' prepared call keeps its last). None otherwise."""
        if self._has_scratch is not False or self._tapes is None:
            return None
        return self._tapes.get(ptrs)

    def _record(self, ptrs: tuple[int, ...], stream: int) -> None:
        """Prepare the launch over ``ptrs`` (upload while borrowing), make it, and keep its driver calls."""
        names, sizes = self.ptr_names, self._sizes
        saved_dbuf, saved_dev = self._dbuf, self._dev  # type: ignore[attr-defined]
        own = {n: b for n, b in saved_dbuf.items() if n not in names}
        try:
            self._dbuf = {**own, **{n: _Borrowed(p, nb) for n, p, nb in zip(names, ptrs, sizes, strict=True)}}
            self._dev, self._borrowing = _OnStream(saved_dev, stream), True
            self.upload({})  # type: ignore[attr-defined]
            with launches.recording() as tape:
                self.launch()  # type: ignore[attr-defined]
            if self._tapes is None:
                self._tapes = collections.OrderedDict()
            self._tapes[ptrs] = tape
            while len(self._tapes) > TAPES:
                self._tapes.popitem(last=False)
        finally:
            scratch = {n: b for n, b in self._dbuf.items() if not isinstance(b, _Borrowed)}
            self._dev, self._borrowing = saved_dev, False
            self._dbuf = {**{n: b for n, b in saved_dbuf.items() if n in names}, **scratch}
            self._has_scratch = bool(scratch)

    def _zero_on(self, stream: int) -> None:
        """Zero the buffers made inside a capture (``_zeroed``) on ``stream``, before the launch queued after."""
        drv = self._dev.driver
        on_stream = _StreamDriver(getattr(drv, "_driver", drv), stream)
        for buf in self._unzeroed:
            _check(on_stream.cuMemsetD8(buf.ptr, 0, buf.nbytes), "cuMemsetD8")
        self._unzeroed = ()

    def _wait_for_scratch(self, stream: int) -> None:
        """Order this launch after the last one that used the kernel's scratch, when that ran on another
        stream (the first time: after Tracea's own stream, where the scratch was zeroed and filled, and the legacy
        stream before it)."""
        if self._order is None:
            own = int(getattr(self._dev, "_real", self._dev).stream.handle)
            self._order = (launches.joined(own, 0), own)
        ev, last = self._order
        if last != stream:
            launches.wait(stream, ev)


class CudaKernel(OnCallerBuffers):
    """A compiled kernel for one operation on the current GPU."""

    _cooperative = False  # a cooperative launch (all blocks resident at once: the split softmax)

    def __init__(self, op: Any, artifact: Artifact, rendered: Rendered, scalars: dict[str, float | int]) -> None:
        self.op = op
        self.artifact = artifact
        self.rendered = rendered
        self._dev = _Device.get()
        try:
            obj = modules.library(artifact.binary)  # once per distinct cubin in a process (modules.py)
            self._kernel = obj.get_kernel(rendered.entry)
        except Exception as exc:  # noqa: BLE001
            raise LaunchError(f"cannot load {artifact.binary}: {exc}",
                              "delete the file (a cache entry) and build again; a cubin for another GPU "
                              "does not load here") from None
        if rendered.smem > 48 * 1024:
            self._allow_smem(rendered.smem)
        self._driver_resources()
        self._func = self._function()
        self._grid3, self._block3 = launches.dims(rendered.grid), launches.dims(rendered.block)
        self._scalars = scalars
        self._shapes = {k: tuple(v) for k, v in op.shapes().items()}
        self._dtype = op.output_dtype.storage
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

    def _function(self) -> int:
        """The loaded kernel as a CUfunction handle (cuLaunchKernel's), from cuda-core's CUkernel."""
        d = self._dev.driver
        handle = self._kernel._handle if hasattr(self._kernel, "_handle") else self._kernel.handle
        if isinstance(handle, d.CUkernel):
            handle = _check(d.cuKernelGetFunction(handle), "cuKernelGetFunction")
        return int(handle)

    def _allow_smem(self, nbytes: int) -> None:
        handle = self._kernel._handle if hasattr(self._kernel, "_handle") else self._kernel.handle
        modules.allow_dynamic_smem(self._dev.driver, handle, self._dev.dev.device_id, nbytes)

    # -------------------------------------------------------------- buffers
    def _buffer(self, name: str, nbytes: int) -> DeviceArray:
        buf = self._dbuf.get(name)
        if buf is None or buf.nbytes != nbytes:
            buf = self._dbuf[name] = DeviceArray(self._dev, nbytes)
        return buf

    def _zeroed(self, name: str, nbytes: int) -> DeviceArray:
        """A buffer of this kernel's own that must start at zero (split-K semaphores, a copy's channel
        padding), zeroed when it is made and not again: its kernels leave it zero after every launch, or never
        write the zeroed part. So a preparation for new pointers issues no memset, and a CUDA graph captured
        over one holds none (at batch 1, ResNet-50's 15 split-K convolutions each added a memset node to
        every replay, and the gaps around them)."""
        buf = self._dbuf.get(name)
        if buf is None or buf.nbytes != nbytes:
            buf = self._buffer(name, nbytes)
            _check(self._dev.driver.cuMemsetD8(buf.ptr, 0, nbytes), "cuMemsetD8")
            if getattr(self._dev, "_real", None) is not None and launches.capturing(int(self._dev.stream.handle)):
                # made while a CUDA graph captures: that memset is a node of the graph, run at its replays only;
                # the next launch outside the graph zeroes it first, on its own stream (``launch_ptrs``)
                self._unzeroed = (*self._unzeroed, buf)
        return buf

    def _check_inputs(self, inputs: Any) -> dict[str, np.ndarray]:
        if not hasattr(inputs, "keys"):
            raise BadInputError(f"inputs: expected a dict of arrays ({', '.join(self._shapes)})")
        out = {}
        for name, shape in self._shapes.items():
            x = inputs.get(name)
            if not isinstance(x, np.ndarray):
                raise BadInputError(f"inputs: missing {name!r} (expected {', '.join(self._shapes)})")
            want = self.op.input_dtype(name)
            if x.shape != shape or x.dtype != want:
                raise BadInputError(f"inputs[{name!r}]: {x.shape} {x.dtype}, expected {shape} {want}")
            out[name] = np.ascontiguousarray(x)
        return out

    def upload(self, inputs: dict[str, np.ndarray]) -> None:
        if self._borrowing:  # launch_ptrs: the buffers are the caller's; a subclass's upload then reads their pointers
            return
        self._tapes = None  # the launch arguments now point at this object's own buffers: record again
        for name, x in self._check_inputs(inputs).items():
            self._buffer(name, x.nbytes).upload(x)
        self._buffer("out", int(np.prod(self._out_shape)) * self._dtype.itemsize)

    def _args(self) -> list[Any]:
        return pack_args(self.rendered.params, (*BUFFERS, "workspace"), FLOAT_SCALARS, self._dbuf, self._scalars)

    def launch(self) -> None:
        """One launch on the device-resident buffers (asynchronous), on the device's stream."""
        launches.kernel(self._func, self._grid3, self._block3, self.rendered.smem, self._dev.stream, self._args(),
                        self._cooperative)

    # -------------------------------------------------------------- calls
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
            for name in self.op.side_outputs():  # written beside C (an FP8 C's amax): into the caller's arrays
                got = np.empty(self._shapes[name], self.op.input_dtype(name))
                self._dbuf[name].download(got)
                inputs[name][...] = got
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
