"""Loading a cubin through cuda-core, launching it on NumPy arrays, and timing it with CUDA events.

``CudaKernel(inputs, out)`` is synchronous with host arrays in and out (copies included).
``CudaKernel.time`` keeps the inputs on the device, flushes L2 before each run (a memset over a buffer
twice the L2 size, outside the timed interval) and times each launch alone between two events.
Device memory is taken with plain allocations (cuMemAlloc), never managed memory.
"""

from __future__ import annotations

import threading
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

    @classmethod
    def get(cls) -> _Device:
        with cls._lock:
            if cls._inst is None:
                cls._inst = _Device()
            cls._inst.dev.set_current()
            return cls._inst

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

    def upload(self, host: np.ndarray) -> None:
        _check(self.dev.driver.cuMemcpyHtoD(self.ptr, np.ascontiguousarray(host), host.nbytes), "cuMemcpyHtoD")

    def download(self, host: np.ndarray) -> None:
        _check(self.dev.driver.cuMemcpyDtoH(host, self.ptr, host.nbytes), "cuMemcpyDtoH")

    def __del__(self) -> None:
        try:
            self.dev.driver.cuMemFree(self.ptr)
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


class CudaKernel:
    """A compiled kernel for one operation on the current GPU."""

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
