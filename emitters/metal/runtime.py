"""Metal kernels from Python through PyObjC's Metal bindings (pyobjc-framework-Metal, ``import Metal``):
each kernel compiled from its MSL source at run time, launched on buffers made from NumPy arrays, timed with
its command buffers' GPU timestamps; and the backend's verify-then-time beside PyTorch's MPS kernels
(``bench_on_device``, ``vendor_on_device``: torch_mps.py). Nothing here has run on a Mac yet (docs/metal.md);
on any other machine ``metal_problem()`` says why in one line and ``MetalKernel`` raises ``UnsupportedError``
with it. What a dispatch needs besides Metal (argument packing, launch limits, timings) is dispatch.py's.

The calls, as Apple documents them (developer.apple.com/documentation/metal) and PyObjC bridges them
(pyobjc.readthedocs.io/en/latest/apinotes/Metal.html: the whole API; a selector's colons spelt ``_``; an
``NSError **`` argument passed as None and returned as the second item of a tuple). tinygrad's Metal runtime
(tinygrad/runtime/ops_metal.py) makes the same PyObjC calls:

* ``MTLCreateSystemDefaultDevice()``; ``device.supportsFamily_(MTLGPUFamilyApple7)`` (simdgroup matrices);
* ``device.newLibraryWithSource_options_error_(source, options, None) -> (library, error)``, the options an
  ``MTLCompileOptions`` with ``languageVersion`` 3.0 and IEEE math (``mathMode`` ``MTLMathModeSafe`` from
  macOS 15, ``fastMathEnabled`` False before: compiler.py's ``-fno-fast-math``);
* ``library.newFunctionWithName_(name)``, ``device.newComputePipelineStateWithFunction_error_(fn, None)``;
  ``pso.maxTotalThreadsPerThreadgroup()`` (it can be under 1024 for a kernel with many registers),
  ``pso.staticThreadgroupMemoryLength()``, ``device.maxThreadgroupMemoryLength()``;
* ``device.newBufferWithLength_options_(n, MTLResourceStorageModeShared)`` and ``buffer.contents()
  .as_buffer(n)``: a writable memoryview of the buffer (shared storage: the CPU and GPU see one memory);
* ``queue = device.newCommandQueue()``, ``cb = queue.commandBuffer()``, ``enc = cb.computeCommandEncoder()``,
  ``enc.setComputePipelineState_``, ``setBuffer_offset_atIndex_``, ``setBytes_length_atIndex_`` (the
  ``constant`` scalars), ``dispatchThreadgroups_threadsPerThreadgroup_(MTLSizeMake(*grid),
  MTLSizeMake(*block))``, ``enc.endEncoding()``, ``cb.commit()``, ``cb.waitUntilCompleted()``,
  ``cb.status()`` / ``cb.error()``;
* ``cb.GPUStartTime()`` / ``cb.GPUEndTime()``: "the host time, in seconds" at which the GPU started and
  finished the command buffer, 0.0 until it has finished (developer.apple.com/documentation/metal/
  mtlcommandbuffer/gpustarttime). A timed sample is one command buffer holding one dispatch, so it counts the
  command buffer's own start on the GPU (microseconds) beside the kernel; PyTorch's MPS events around a call
  count the same;
* the cache flush before each timed sample: ``cb.blitCommandEncoder().fillBuffer_range_value_`` over
  ``FLUSH_BYTES`` in a command buffer of its own, committed first on the same queue.
"""

from __future__ import annotations

import functools
import platform
from types import SimpleNamespace
from typing import Any

import numpy as np

from tracea.doctor.errors import CompileError, LaunchError, UnsupportedError

from ..timing import Timing
from .core import Launch
from .dispatch import FLUSH_BYTES, check_launch, pack, timing_of

HINT = "run on a Mac with Apple silicon (M1 or later) and pip install pyobjc-framework-Metal"
APPLE7 = 1007  # MTLGPUFamilyApple7's value, where the bindings lack the name


# ----------------------------------------------------------------------------------- whether Metal runs here

def platform_problem(system: str) -> str | None:
    """Why a process on ``system`` (``platform.system()``) cannot run Metal, or None on macOS."""
    return None if system == "Darwin" else f"not macOS ({system or 'an unknown system'})"


def family_problem(name: str, apple7: bool) -> str | None:
    """Why the GPU ``name`` cannot run these kernels (``apple7``: it supports MTLGPUFamilyApple7), or None."""
    if apple7:
        return None
    return f"the GPU ({name}) is not of Apple GPU family 7 or later (M1 and later), whose simdgroup matrices the kernels use"


@functools.lru_cache(maxsize=1)
def _device() -> tuple[Any, Any]:
    """(the ``Metal`` module, the system's default device), or raises ImportError / RuntimeError."""
    import Metal

    device = Metal.MTLCreateSystemDefaultDevice()
    if device is None:
        raise RuntimeError("Metal finds no GPU (MTLCreateSystemDefaultDevice returned none)")
    return Metal, device


@functools.lru_cache(maxsize=1)
def metal_problem() -> str | None:
    """None when this process can run Metal kernels (macOS, PyObjC's Metal module, an Apple7+ GPU); otherwise
    why not, in one line ("not macOS (Linux)")."""
    why = platform_problem(platform.system())
    if why:
        return why
    try:
        M, device = _device()
    except ImportError:
        return "PyObjC's Metal bindings are not installed (pip install pyobjc-framework-Metal)"
    except RuntimeError as exc:
        return str(exc)
    return family_problem(str(device.name()), bool(device.supportsFamily_(getattr(M, "MTLGPUFamilyApple7", APPLE7))))


# ------------------------------------------------------------------------------------------------ on Metal

def _compile_options(M: Any) -> Any:
    opts = M.MTLCompileOptions.new()
    opts.setLanguageVersion_(getattr(M, "MTLLanguageVersion3_0", 0x30000))
    if hasattr(opts, "setMathMode_") and hasattr(M, "MTLMathModeSafe"):  # macOS 15 and later
        opts.setMathMode_(M.MTLMathModeSafe)
    else:
        opts.setFastMathEnabled_(False)
    return opts


def _error_line(err: Any, fallback: str) -> str:
    text = str(err.localizedDescription()) if err is not None else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "error" in ln.lower()] or \
        [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0][:300] if lines else fallback


class MetalKernel:
    """One ``Launch`` compiled by Metal at run time (``newLibraryWithSource``) on this Mac's GPU: ``run`` fills
    ``out`` from the input arrays, ``time`` gives each timed dispatch's GPU seconds."""

    def __init__(self, launch: Launch) -> None:
        problem = metal_problem()
        if problem:
            raise UnsupportedError(f"Metal kernels cannot run here: {problem}", HINT)
        M, device = _device()
        self.launch, self.M, self.device = launch, M, device
        lib, err = device.newLibraryWithSource_options_error_(launch.source, _compile_options(M), None)
        if lib is None:
            raise CompileError(f"Metal did not compile {launch.name}: {_error_line(err, 'no library')}")
        fn = lib.newFunctionWithName_(launch.name)
        if fn is None:
            raise CompileError(f"the compiled library has no kernel named {launch.name}")
        pso, err = device.newComputePipelineStateWithFunction_error_(fn, None)
        if pso is None:
            raise CompileError(f"Metal made no pipeline for {launch.name}: {_error_line(err, 'no pipeline')}")
        check_launch(launch, pso.maxTotalThreadsPerThreadgroup(), device.maxThreadgroupMemoryLength(),
                     pso.staticThreadgroupMemoryLength())
        self.pipeline, self.queue = pso, device.newCommandQueue()
        self._flush: Any = None

    def _buffer(self, arr: np.ndarray) -> Any:
        buf = self.device.newBufferWithLength_options_(max(arr.nbytes, 16), self.M.MTLResourceStorageModeShared)
        if buf is None:
            raise LaunchError(f"Metal could not allocate a buffer of {arr.nbytes} bytes")
        if arr.nbytes:
            buf.contents().as_buffer(arr.nbytes)[:] = arr.tobytes()
        return buf

    def _bind(self, buffers: dict[str, np.ndarray], out: np.ndarray) -> tuple[list[tuple[int, str, Any]], Any]:
        """The arguments with Metal buffers in place of the arrays, and the output's buffer."""
        bound, out_buf = [], None
        for i, kind, value in pack(self.launch, buffers, out):
            if kind == "buffer":
                value = self._buffer(value)
                out_buf = value if self.launch.args[i][0] == "out" else out_buf
            bound.append((i, kind, value))
        return bound, out_buf

    def _dispatch(self, bound: list[tuple[int, str, Any]]) -> Any:
        """A committed command buffer with the one dispatch."""
        M, ln = self.M, self.launch
        cb = self.queue.commandBuffer()
        enc = cb.computeCommandEncoder()
        enc.setComputePipelineState_(self.pipeline)
        for i, kind, value in bound:
            if kind == "buffer":
                enc.setBuffer_offset_atIndex_(value, 0, i)
            else:
                enc.setBytes_length_atIndex_(value, len(value), i)
        enc.dispatchThreadgroups_threadsPerThreadgroup_(M.MTLSizeMake(*ln.grid), M.MTLSizeMake(*ln.block))
        enc.endEncoding()
        cb.commit()
        return cb

    def _wait(self, cb: Any) -> None:
        cb.waitUntilCompleted()
        if cb.status() == getattr(self.M, "MTLCommandBufferStatusError", 5):
            raise LaunchError(f"{self.launch.name} failed on the GPU: {_error_line(cb.error(), 'a command buffer error')}")

    def _flush_caches(self, i: int) -> None:
        if self._flush is None:
            self._flush = self.device.newBufferWithLength_options_(FLUSH_BYTES, self.M.MTLResourceStorageModePrivate)
        cb = self.queue.commandBuffer()
        blit = cb.blitCommandEncoder()
        blit.fillBuffer_range_value_(self._flush, (0, FLUSH_BYTES), i & 0xFF)
        blit.endEncoding()
        cb.commit()

    def run(self, buffers: dict[str, np.ndarray], out: np.ndarray) -> None:
        """One launch on copies of ``buffers``; ``out`` (its storage array) is uploaded first, so an element
        the kernel does not write keeps its value (a poisoned ``out`` shows it), and read back after."""
        bound, out_buf = self._bind(buffers, out)
        self._wait(self._dispatch(bound))
        if out.nbytes:
            view = out.reshape(-1).view(np.uint8)
            view[:] = np.frombuffer(out_buf.contents().as_buffer(out.nbytes), dtype=np.uint8)

    def time(self, buffers: dict[str, np.ndarray], out: np.ndarray, warmup: int = 3, repeats: int = 20,
             flush: bool = True) -> list[float]:
        """GPU seconds of ``repeats`` launches, each its own command buffer after ``warmup`` untimed ones and
        (``flush``) after a fill of ``FLUSH_BYTES``, waited for one at a time so no two overlap."""
        bound, _ = self._bind(buffers, out)
        last = None
        for _ in range(max(warmup, 0)):
            last = self._dispatch(bound)
        if last is not None:
            self._wait(last)
        seconds = []
        for i in range(max(repeats, 1)):
            if flush:
                self._flush_caches(i)
            cb = self._dispatch(bound)
            self._wait(cb)
            seconds.append(float(cb.GPUEndTime()) - float(cb.GPUStartTime()))
        return seconds


def kernels_problem() -> str | None:
    """None when this process runs the kernels one way or the other: Metal through PyObjC (``metal_problem``)
    or PyTorch's MPS shader library (ops_mps.py ``mps_problem``); otherwise both reasons, in one line."""
    from .ops_mps import mps_problem

    metal, mps = metal_problem(), mps_problem()
    return None if metal is None or mps is None else f"{metal}; and on mps tensors: {mps}"


class OpKernel:
    """What the backend builds for one op. ``kernel(inputs, out)`` runs it on NumPy storage arrays and
    ``kernel.time(inputs, warmup, repeats, flush_l2)`` gives a ``Timing``: through Metal with PyObjC
    (``MetalKernel``, GPU timestamps) where it loads, else through PyTorch's MPS shader library (byte copies
    of the arrays, MPS events). ``kernel.launch_tensors(feeds, out)`` launches it on a caller's ``mps``
    tensors in place (ops_mps.py, for ``tracea.ops``). ``check()`` compiles it now with the runner this
    process has, so that a compile error is the build's."""

    def __init__(self, op: Any, launch: Launch, artifact: Any = None) -> None:
        # the build's record (emitters/artifact.py); without one, what tracea.ops' route reads of it
        self.artifact = artifact if artifact is not None else SimpleNamespace(name=launch.name, cache_hit=None)
        self.op, self.launch = op, launch
        self._metal: MetalKernel | None = None
        self._shader: Any = None

    def metal(self) -> MetalKernel:
        if self._metal is None:
            self._metal = MetalKernel(self.launch)
        return self._metal

    def shader(self) -> Any:
        if self._shader is None:
            from .ops_mps import MpsShader

            self._shader = MpsShader(self.launch)
        return self._shader

    @property
    def runner(self) -> str:
        """Which runner ``__call__`` and ``time`` use here."""
        return "Metal (PyObjC)" if metal_problem() is None else "PyTorch's MPS shader library"

    def check(self) -> None:
        why = kernels_problem()
        if why is not None:
            raise UnsupportedError(f"Metal kernels cannot run here: {why}", HINT)
        if metal_problem() is None:
            self.metal()
        else:
            self.shader()

    def __call__(self, inputs: dict[str, np.ndarray], out: np.ndarray) -> None:
        if metal_problem() is None:
            self.metal().run(inputs, out)
        else:
            self.shader().run_arrays(inputs, out)

    def time(self, inputs: dict[str, np.ndarray], warmup: int = 3, repeats: int = 20, flush_l2: bool = True) -> Timing:
        out = np.zeros(self.op.output_shape(), self.op.output_dtype.storage)
        if metal_problem() is None:
            return timing_of(self.metal().time(inputs, out, warmup, repeats, flush_l2))
        return self.shader().time_arrays(inputs, out, warmup, repeats, flush_l2)

    def launch_tensors(self, feeds: dict[str, Any], out: Any) -> None:
        self.shader()(feeds, out)


# ----------------------------------------------------------------------------- the backend's device bench

def bench_on_device(kernel: Any, op: Any, inputs: dict[str, np.ndarray], ref: np.ndarray, tol: float, warmup: int,
                    repeats: int) -> dict[str, Any]:
    """Verify ``kernel`` (poisoned output, in this process), then time it and PyTorch's MPS call for ``op`` in
    the same run (BenchResult fields, as emitters/device_baselines.py's; torch_mps.py)."""
    from .torch_mps import bench

    return bench(kernel, op, inputs, ref, tol, warmup, repeats)


def vendor_on_device(op: Any, inputs: dict[str, np.ndarray], ref: np.ndarray, warmup: int, repeats: int,
                     kernel: Any = None) -> dict[str, Any]:
    """PyTorch's MPS call for ``op`` verified against ``ref`` and timed ({name, p50_ms, p95_ms, rel_err} or
    {name, reason}); with ``kernel``, both in alternating rounds (torch_mps.py)."""
    from .torch_mps import vendor

    return vendor(op, inputs, ref, warmup, repeats, kernel)
