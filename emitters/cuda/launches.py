"""The driver calls of every launch Tracea makes on an NVIDIA GPU, and the tape that replays them.

A launch is one or more of ``cuLaunchKernel``, ``cuLaunchCooperativeKernel`` and ``cuMemcpy2DAsync`` (the
padded and transposed copies some kernels make first), called here through ctypes on libcuda: about a
microsecond of host time each, where the cuda-core and cuda-bindings wrappers cost several. The events and
the capture query that order a kernel's own scratch across streams are here too.

``recording()`` keeps the calls one launch makes as a ``Tape`` with the stream left open. The launch
arguments (device pointers, tensor maps, sizes) do not depend on the stream, so a ``tracea.ops`` call that
repeats the last one's buffers replays the tape on the caller's current stream: the driver calls and a
loop, nothing else (``CudaKernel.launch_ptrs``).

libcuda is opened on first use, so importing this module needs no driver.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tracea.doctor.errors import LaunchError

_LIB: list[Any] = []
_LOCAL = threading.local()
INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT: this thread has no current context (set it, try again)
CONTEXT = [0]  # the primary context Tracea's device made current (runtime._Device), for threads without one


def lib() -> Any:
    """libcuda with the argument types of the calls made here."""
    if not _LIB:
        name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
        try:
            cu = ctypes.CDLL(name)
        except OSError as exc:
            raise LaunchError(f"cannot open the CUDA driver ({name}): {exc}", "install the NVIDIA driver") from None
        vp, u, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
        cu.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, vp, vp]
        cu.cuLaunchCooperativeKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, vp]
        cu.cuMemcpy2DAsync_v2.argtypes = [vp, vp]
        cu.cuEventCreate.argtypes = [ctypes.POINTER(vp), u]
        cu.cuEventRecord.argtypes = [vp, vp]
        cu.cuStreamWaitEvent.argtypes = [vp, vp, u]
        cu.cuStreamIsCapturing.argtypes = [vp, ctypes.POINTER(i)]
        cu.cuCtxSetCurrent.argtypes = [vp]
        cu.cuGetErrorName.argtypes = [i, ctypes.POINTER(ctypes.c_char_p)]
        for fn in ("cuLaunchKernel", "cuLaunchCooperativeKernel", "cuMemcpy2DAsync_v2", "cuEventCreate",
                   "cuEventRecord", "cuStreamWaitEvent", "cuStreamIsCapturing", "cuCtxSetCurrent", "cuGetErrorName"):
            getattr(cu, fn).restype = i
        _LIB.append(cu)
    return _LIB[0]


def error_name(code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if lib().cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return f"{name.value.decode()} ({code})"
    except Exception:  # noqa: BLE001 - naming an error must not raise another
        pass
    return f"CUDA error {code}"


def handle(h: Any) -> int:
    """A stream, function, event or context handle as an int (cuda-bindings objects, cuda-core objects, ints)."""
    if isinstance(h, int):
        return h
    inner = getattr(h, "handle", None)  # a cuda-core Stream
    return int(h if inner is None else inner)


def set_context(ctx: int) -> None:
    """Make ``ctx`` current on this thread (the process's primary context, for a thread that has none yet)."""
    rc = lib().cuCtxSetCurrent(ctx)
    if rc:
        raise LaunchError(f"cuCtxSetCurrent failed: {error_name(rc)}")


class Tape:
    """The driver calls of one launch, each ``(function, arguments before the stream, arguments after, kind)``
    (kind: ``LAUNCH``, ``COOPERATIVE`` or ``COPY``), and the ctypes objects the arguments point into (kept
    alive with the tape). Replayed by the compiled loop of ``native_replay`` where it can be had: one foreign
    call for the whole tape instead of one per driver call, each converting its arguments."""

    __slots__ = ("steps", "keep", "_native")

    def __init__(self) -> None:
        self.steps: list[tuple[Any, tuple[Any, ...], tuple[Any, ...], int]] = []
        self.keep: list[Any] = []
        self._native: tuple[Any, ...] | None = None  # (replay, steps' address, count, failed step's cell, array)

    def compiled(self) -> tuple[Any, ...]:
        """(``tr_replay``, the rows' address, their count, the failed step's cell's address, the cell, the rows)
        for the compiled loop, or () where the tape replays in Python (``_compiled``)."""
        native = self._native
        if native is None:
            native = self._native = _compiled(self.steps) or ()
        return native

    def replay(self, stream: int) -> None:
        """The recorded calls again, in order, on ``stream``."""
        native = self._native
        if native is None:
            native = self.compiled()
        if native:
            rc = native[0](native[1], native[2], stream, native[3])
            if rc == 0:
                return
            at = native[4].value  # the step that failed: retried as the Python loop would, then the rest
            self._python(stream, at, rc)
            return
        self._python(stream, 0, 0)

    def _python(self, stream: int, start: int, rc: int) -> None:
        for fn, pre, post, _ in self.steps[start:]:
            if not rc:
                rc = fn(*pre, stream, *post)
            if rc:
                _failed(rc, fn, pre, stream, post)
                rc = 0


LAUNCH, COOPERATIVE, COPY = 0, 1, 2

# The replay loop in C: the driver functions by address (no libcuda to link against), each step a row.
REPLAY_C = r"""
#include <stdint.h>
#include <stddef.h>

typedef int (*tr_launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                            void**, void**);
typedef int (*tr_coop_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                          void**);
typedef int (*tr_copy_fn)(const void*, void*);

typedef struct {
    int64_t kind;      /* 0 cuLaunchKernel, 1 cuLaunchCooperativeKernel, 2 cuMemcpy2DAsync */
    void* fn;          /* the driver function */
    void* arg;         /* the CUfunction, or the CUDA_MEMCPY2D */
    void** params;     /* the kernel's parameter array */
    uint32_t dims[8];  /* grid x y z, block x y z, dynamic shared memory, unused */
} tr_step;

int tr_replay(const tr_step* steps, int64_t n, void* stream, int64_t* failed) {
    for (int64_t i = 0; i < n; ++i) {
        const tr_step* s = steps + i;
        const uint32_t* d = s->dims;
        int rc;
        if (s->kind == 0)
            rc = ((tr_launch_fn)s->fn)(s->arg, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, s->params, NULL);
        else if (s->kind == 1)
            rc = ((tr_coop_fn)s->fn)(s->arg, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, s->params);
        else
            rc = ((tr_copy_fn)s->fn)(s->arg, stream);
        if (rc) {
            *failed = i;
            return rc;
        }
    }
    return 0;
}
"""


class _Step(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int64), ("fn", ctypes.c_void_p), ("arg", ctypes.c_void_p),
                ("params", ctypes.c_void_p), ("dims", ctypes.c_uint32 * 8)]


_NATIVE: list[Any] = []  # [tr_replay, or None where it cannot be built]


def native_replay() -> Any:
    """The compiled ``tr_replay`` (``REPLAY_C``, built once by the C compiler into the compile cache), or None:
    no C compiler, a failed build, or ``TRACEA_NATIVE_LAUNCH=0``; tapes then replay in Python."""
    if not _NATIVE:
        fn = None
        if os.environ.get("TRACEA_NATIVE_LAUNCH", "1") != "0":
            try:
                from ..host_compiler import compile_cached, find_compiler

                path, _, _ = compile_cached(REPLAY_C, "tr_launch_replay", ["-O2", "-shared", "-fPIC", "-std=c11"],
                                            find_compiler())
                fn = ctypes.CDLL(str(path)).tr_replay
                fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
                fn.restype = ctypes.c_int
            except Exception:  # noqa: BLE001 - any failure leaves the Python loop, which is correct, only slower
                fn = None
        _NATIVE.append(fn)
    return _NATIVE[0]


def _compiled(steps: list[tuple[Any, tuple[Any, ...], tuple[Any, ...], int]]) -> tuple[Any, ...] | None:
    """The tape as rows of ``tr_step`` for ``tr_replay``, or None where a step's function is no C function (a
    stand-in) or the loop cannot be had."""
    if not steps:
        return None
    addresses = []
    for fn, _, _, _ in steps:
        if not isinstance(fn, ctypes._CFuncPtr):  # type: ignore[attr-defined]
            return None
        addresses.append(ctypes.cast(fn, ctypes.c_void_p).value)
    replay = native_replay()
    if replay is None:
        return None
    rows = (_Step * len(steps))()
    for row, (_, pre, post, kind), address in zip(rows, steps, addresses, strict=True):
        row.kind, row.fn = kind, address
        if kind == COPY:
            row.arg = pre[0]
        else:
            row.arg, row.params = pre[0], ctypes.addressof(post[0])
            for i, v in enumerate(pre[1:8]):
                row.dims[i] = v
    failed = ctypes.c_int64(0)
    return replay, ctypes.addressof(rows), len(steps), ctypes.addressof(failed), failed, rows


def _failed(rc: int, fn: Any, pre: tuple[Any, ...], stream: int, post: tuple[Any, ...]) -> None:
    """A call that failed: once more after making the context current when that was the cause (a thread
    that has not used the GPU yet), else a LaunchError naming the call and the error."""
    if rc == INVALID_CONTEXT and CONTEXT[0]:
        set_context(CONTEXT[0])
        rc = fn(*pre, stream, *post)
        if rc == 0:
            return
    raise LaunchError(f"{getattr(fn, '__name__', 'a driver call')} failed: {error_name(rc)}")


def _call(fn: Any, pre: tuple[Any, ...], stream: Any, post: tuple[Any, ...], keep: Any, kind: int) -> None:
    s = handle(stream)
    tape: Tape | None = getattr(_LOCAL, "tape", None)
    rc = fn(*pre, s, *post)
    if rc:
        _failed(rc, fn, pre, s, post)
    if tape is not None:
        tape.steps.append((fn, pre, post, kind))
        tape.keep.append(keep)


_CTYPES = {"uint64": ctypes.c_uint64, "int64": ctypes.c_int64, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32,
           "float32": ctypes.c_float, "float64": ctypes.c_double}


def _value(a: Any) -> Any:
    """A launch argument as a ctypes object: ctypes values and structures (tensor maps) as they are, NumPy
    scalars by their type (a pointer is an np.uint64, a size an np.int32, a float scalar an np.float32)."""
    if isinstance(a, (ctypes._SimpleCData, ctypes.Structure)):
        return a
    dtype = getattr(a, "dtype", None)
    kind = _CTYPES.get(str(dtype)) if dtype is not None else None
    if kind is None:
        raise LaunchError(f"a launch argument of type {type(a).__name__} has no ctypes form")
    return kind(a.item())


def params(args: Sequence[Any]) -> tuple[Any, list[Any]]:
    """(the ``void**`` array cuLaunchKernel reads, the ctypes values it points at)."""
    values = [_value(a) for a in args]
    return (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values]), values


def dims(d: Any) -> tuple[int, int, int]:
    t = (d,) if isinstance(d, int) else tuple(int(x) for x in d)
    return (t + (1, 1, 1))[:3]  # type: ignore[return-value]


def kernel(func: Any, grid: Any, block: Any, smem: int, stream: Any, args: Sequence[Any],
           cooperative: bool = False) -> None:
    """Launch ``func`` (a CUfunction) on ``stream`` with ``args`` in parameter order."""
    array, values = params(args)
    (gx, gy, gz), (bx, by, bz) = dims(grid), dims(block)
    if cooperative:
        _call(lib().cuLaunchCooperativeKernel, (handle(func), gx, gy, gz, bx, by, bz, int(smem)), stream,
              (array,), (array, values), COOPERATIVE)
    else:
        _call(lib().cuLaunchKernel, (handle(func), gx, gy, gz, bx, by, bz, int(smem)), stream, (array, None),
              (array, values), LAUNCH)


def memcpy2d(copy: Any, stream: Any) -> None:
    """A ``CUDA_MEMCPY2D`` (cuda-bindings' structure) queued on ``stream``."""
    _call(lib().cuMemcpy2DAsync_v2, (copy.getPtr(),), stream, (), copy, COPY)


@contextmanager
def recording() -> Iterator[Tape]:
    """The calls made in this block (on this thread), also made as usual, kept as a Tape."""
    tape = Tape()
    outer = getattr(_LOCAL, "tape", None)
    _LOCAL.tape = tape
    try:
        yield tape
    finally:
        _LOCAL.tape = outer


# ------------------------------------------------------------------------ ordering across streams

def event() -> int:
    ev = ctypes.c_void_p()
    rc = lib().cuEventCreate(ctypes.byref(ev), 2)  # CU_EVENT_DISABLE_TIMING
    if rc:
        raise LaunchError(f"cuEventCreate failed: {error_name(rc)}")
    return int(ev.value or 0)


def record(ev: int, stream: int) -> None:
    rc = lib().cuEventRecord(ev, stream)
    if rc:
        raise LaunchError(f"cuEventRecord failed: {error_name(rc)}")


def wait(stream: int, ev: int) -> None:
    rc = lib().cuStreamWaitEvent(stream, ev, 0)
    if rc:
        raise LaunchError(f"cuStreamWaitEvent failed: {error_name(rc)}")


def joined(stream: int, after: int) -> int:
    """An event recorded on ``stream`` once it has waited for the work queued on ``after`` so far (the legacy
    stream, 0, which a non-blocking stream does not wait for by itself)."""
    first, ev = event(), event()
    record(first, after)
    wait(stream, first)
    record(ev, stream)
    return ev


def capturing(stream: int) -> bool:
    """Whether ``stream`` is capturing a CUDA graph (then nothing from outside the capture may be waited on)."""
    status = ctypes.c_int()
    rc = lib().cuStreamIsCapturing(stream, ctypes.byref(status))
    if rc:
        raise LaunchError(f"cuStreamIsCapturing failed: {error_name(rc)}")
    return status.value != 0
