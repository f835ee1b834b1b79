"""The fast path of a repeated ``tracea.ops`` call: a prepared launcher per call signature.

The first call of a signature takes the slow path (_dispatch.run): every argument check, the route, the
kernel. When that ran a Tracea kernel, a ``Prepared`` is kept under the call's key, which holds everything
those checks and the route read: each array's type, dtype, shape and strides, its device and whether
autograd tracks it here, a given ``out``'s writeability, and every option with its type (``True`` is not
``1``: the slow path refuses one and takes the other). A later call with an equal key has passed every one
of those checks already. What is left depends on the call's own memory, and the prepared call does it: the
result allocated (or a given ``out`` checked against the inputs for overlap), the pointers read, and the
kernel launched on them (on a GPU, the recorded driver calls of the last launch replayed on the caller's
current stream while the pointers repeat). Anything else takes the slow path and is prepared in turn: a
new shape, dtype, stride, device, option, a type the key does not know (a NumPy subclass, a torch tensor
subclass, a list), a torch ``block_mask`` (its contents would need a device read), and ``explain``.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError, TraceaError

from ._engine import LAST, STATS, Route

PREPARED: dict[tuple[Any, ...], Prepared] = {}
MISS = object()  # _dispatch.prepared: no prepared launch for the key; the slow path prepares it
RETRY = object()  # the slow path, preparing nothing (a key that cannot be one, or a prepared launch that failed)
LIMIT = 4096  # prepared signatures kept (a model's layers and shapes); the oldest leave first
_LOCK = threading.Lock()
_TENSORS: set[type] = set()  # torch.Tensor and nn.Parameter, once a call has brought torch tensors
_GRAD: list[Callable[[], bool]] = []  # torch.is_grad_enabled


class Uncached(Exception):
    """An argument the key cannot describe: the call takes the slow path and is not prepared."""


def array_key(x: Any) -> Any:
    t = type(x)
    if t is np.ndarray:
        return t, x.dtype, x.shape, x.strides
    if x is None:
        return None
    if t in _TENSORS:  # the negative bit: a lazily negated view has another value in the same memory
        return t, x.dtype, x.shape, x.stride(), x.device, x.requires_grad and _GRAD[0](), x.is_neg()
    torch = sys.modules.get("torch")
    if torch is not None and not _TENSORS and (t is torch.Tensor or t is torch.nn.Parameter):
        torch_seen(torch)  # the first torch tensor of the process
        return array_key(x)
    raise Uncached


def out_key(x: Any) -> Any:
    if type(x) is np.ndarray:
        return np.ndarray, x.dtype, x.shape, x.strides, x.flags.writeable
    return array_key(x)


def mask_key(x: Any) -> Any:
    """A NumPy block mask by its contents (a few bytes: one per tile pair); a tensor's is not read here."""
    if x is None:
        return None
    if type(x) is np.ndarray:
        return np.ndarray, x.dtype, x.shape, x.tobytes()
    raise Uncached


def opt(v: Any) -> Any:
    """An option as the key holds it: equal only where the slow path cannot tell the two apart."""
    t = type(v)
    if t is int or v is None:
        return v
    if t is tuple or t is list:
        if t is tuple and all(type(e) is int for e in v):
            return v
        return t, tuple(opt(e) for e in v)
    if t is float or t is str or t is bool or isinstance(v, np.generic):
        return t, v
    raise Uncached


def torch_seen(torch: Any) -> None:
    """A call brought torch tensors: from now on their keys are made (torch is never imported here)."""
    if not _TENSORS:
        _GRAD.append(torch.is_grad_enabled)
        _TENSORS.update({torch.Tensor, torch.nn.Parameter})


def clear() -> None:
    with _LOCK:
        PREPARED.clear()


def _numpy_ptr(x: np.ndarray) -> int:
    try:  # the buffer protocol: a fraction of __array_interface__'s cost (a dict of six entries each time)
        return ctypes.addressof(ctypes.c_char.from_buffer(x))
    except (TypeError, ValueError, BufferError):  # read-only, or a transposed (column-major) operand
        return x.__array_interface__["data"][0]


def _numpy_alloc(shape: tuple[int, ...], dtype: Any) -> Callable[[tuple[Any, ...]], Any]:
    return lambda arrays: np.empty(shape, dtype)


def _torch_alloc(torch: Any, result: Any, arrays: tuple[Any, ...]) -> tuple[Callable[[tuple[Any, ...]], Any], Any, int]:
    """The result's allocation from the call's arrays: ``empty_like`` of an input the result matches (shape,
    strides, dtype, device; dense, no negative bit: the key pins all of them, so every call's input of that
    signature does too), a third cheaper than ``empty_strided``'s keywords; else ``empty_strided``. Returned
    twice: as a function of the call's arrays, and as the compiled call takes it (a callable and the index
    of the array it is given; -1: called with nothing)."""
    shape, stride, dtype, device = tuple(result.shape), tuple(result.stride()), result.dtype, result.device
    for i, a in enumerate(arrays):
        if (type(a) in _TENSORS and tuple(a.shape) == shape and tuple(a.stride()) == stride and a.dtype == dtype
                and a.device == device and a.is_contiguous() and not a.is_neg()):
            return (lambda arrays, i=i, empty_like=torch.empty_like: empty_like(arrays[i])), torch.empty_like, i
    strided = functools.partial(torch.empty_strided, shape, stride, dtype=dtype, device=device)
    return (lambda arrays: strided()), strided, -1


def _stream(torch: Any, index: int) -> Callable[[], int]:
    """The caller's current CUDA stream on device ``index``, as a handle."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return functools.partial(raw, index)
    return lambda: torch.cuda.current_stream(index).cuda_stream


class Prepared:
    """One signature's launch: the kernel, where each of its buffers comes from in the call, how the result
    is made, and the route a call of it reports (``explain()``). ``last``: the pointers of the last launch and
    its recorded driver calls, where replaying them is the whole launch (``replayable``): a call on the same
    pointers (a model's layer on the same buffers, a loop over one tensor) replays it without the kernel's
    lookup. One tuple, replaced whole, so that two threads never pair one call's pointers with another's tape."""

    __slots__ = ("kernel", "slots", "out_at", "nbytes", "out_bytes", "ptr", "alloc", "stream", "route", "names",
                 "last", "replayable", "fast", "c_alloc")

    def __init__(self, kernel: Any, slots: tuple[int, ...], nbytes: tuple[int, ...], out_bytes: int,
                 ptr: Callable[[Any], int], alloc: Callable[[tuple[Any, ...]], Any], stream: Callable[[], int] | None,
                 route: Route, names: tuple[str, ...]) -> None:
        self.kernel, self.slots, self.nbytes, self.out_bytes = kernel, slots, nbytes, out_bytes
        self.out_at = slots.index(-1)
        self.ptr, self.alloc, self.stream, self.route, self.names = ptr, alloc, stream, route, names
        self.last: tuple[tuple[int, ...] | None, Any] = (None, None)
        self.replayable = getattr(kernel, "replayable", None)
        self.fast: Any = None  # the compiled call (_native_call.Launcher) of a call without out=, where it exists
        self.c_alloc: tuple[Any, int] | None = None  # (allocation, array index) as the compiled call takes them

    def finish(self, missed: tuple[Any, tuple[int, ...], int]) -> Any:
        """The compiled call's ``(result, pointers, stream)`` where it kept no tape for these pointers: the
        launch made here, and its tape given to the compiled call for the next call on them."""
        out, key, stream = missed
        try:
            self.kernel.launch_ptrs(key, stream)
        except TraceaError:
            return RETRY
        self._keep_tape(key)
        STATS["fast_path"] += 1
        LAST.route = self.route
        return out

    def _keep_tape(self, key: tuple[int, ...]) -> None:
        """The tape of the launch just made over ``key`` given to the compiled call, which is made from the
        first such tape (its compiled replay loop: the backend's, reached through the tape, never imported)."""
        tape = self.replayable(key) if self.replayable is not None else None
        native = tape.compiled() if tape is not None else ()
        if not native:
            return
        if self.fast is None:
            if self.c_alloc is None:
                return
            self.fast = _compiled_call(self, native[0])
            if self.fast is None:
                self.c_alloc = None  # cannot be had here: not asked again
                return
        self.fast.add(key, tape, native[1], native[2])

    def __call__(self, arrays: tuple[Any, ...], out: Any) -> Any:
        """The launch on this call's buffers, returning the result; ``RETRY`` where it failed (the op's slow
        path then does what it does with a launch that fails: a vendor fallback, or the error)."""
        ptr = self.ptr
        ptrs = [0 if i < 0 else ptr(arrays[i]) for i in self.slots]
        if out is None:
            out = self.alloc(arrays)
            optr = ptr(out)
        else:  # the one check a key cannot make: a given out must not share memory with an input
            optr = ptr(out)
            end = optr + self.out_bytes
            for i, p, nb in zip(self.slots, ptrs, self.nbytes, strict=True):
                if i >= 0 and p < end and optr < p + nb:
                    raise BadInputError(f"out: overlaps the input {self.names[i]!r}; the kernel would read what it "
                                        "writes", "give out= a buffer of its own")
        ptrs[self.out_at] = optr
        key = tuple(ptrs)
        stream = self.stream() if self.stream is not None else 0
        last = self.last
        try:
            if last[0] == key:
                last[1].replay(stream)
            else:
                self.kernel.launch_ptrs(key, stream)
                if self.replayable is not None:
                    tape = self.replayable(key)
                    self.last = (None, None) if tape is None else (key, tape)
                    if tape is not None and self.c_alloc is not None:  # the compiled call made, or its tapes kept
                        self._keep_tape(key)
        except TraceaError:
            return RETRY
        STATS["fast_path"] += 1  # stats() counts it into kernel_hits and tracea too
        LAST.route = self.route
        return out


def keep(key: tuple[Any, ...] | None, names: tuple[str, ...], arrays: tuple[Any, ...], kernel: Any,
         feeds: dict[str, Any], written: Any, result: Any, route: Route, kind: str, device_index: int | None) -> None:
    """Prepare ``key`` after its slow call ran ``kernel``: ``arrays`` are the call's arrays (``names``), ``feeds``
    what the kernel read by buffer name, ``written`` what it wrote (``result`` itself or a view of it). Only
    where every buffer is an argument's own memory (the same address: a transposed, permuted or reshaped
    view of it) is a prepared call the same launch; otherwise nothing is kept."""
    if key is None or not hasattr(kernel, "launch_ptrs"):
        return
    if kind == "numpy":
        ptr: Callable[[Any], int] = _numpy_ptr
        alloc = _numpy_alloc(result.shape, result.dtype)
        stream = None
        size: Callable[[Any], int] = lambda x: x.nbytes  # noqa: E731
    else:
        torch = sys.modules["torch"]
        ptr = torch.Tensor.data_ptr  # the method itself: no Python frame per pointer
        alloc, c_alloc, alloc_at = _torch_alloc(torch, result, arrays)
        stream = _stream(torch, device_index or 0) if result.device.type == "cuda" else None
        size = lambda x: x.numel() * x.element_size()  # noqa: E731
    slots, nbytes = [], []
    for name in kernel.ptr_names:
        if name == "out":
            if ptr(written) != ptr(result):
                return
            slots.append(-1)
            nbytes.append(0)
            continue
        i = names.index(name) if name in names else -1
        if i < 0 or arrays[i] is None or name not in feeds:
            return
        if kind == "numpy":  # an argument the kernel read a copy of (a number, a host array beside tensors): none
            if type(arrays[i]) is not np.ndarray or not isinstance(feeds[name], np.ndarray):
                return
        elif type(arrays[i]) not in _TENSORS or not hasattr(feeds[name], "data_ptr"):
            return
        if ptr(feeds[name]) != ptr(arrays[i]):
            return
        slots.append(i)
        nbytes.append(size(arrays[i]))
    shown = Route(**{**route.__dict__, "notes": list(route.notes)})
    shown.in_process = True
    p = Prepared(kernel, tuple(slots), tuple(nbytes), size(result), ptr, alloc, stream, shown, names)
    if stream is not None and p.replayable is not None:
        p.c_alloc = (c_alloc, alloc_at)  # the compiled call is made by the first launch that keeps a tape
    with _LOCK:
        PREPARED[key] = p
        while len(PREPARED) > LIMIT:
            PREPARED.pop(next(iter(PREPARED)))


def _compiled_call(p: Prepared, replay: Any) -> Any:
    """``p``'s call in C (``_native_call.Launcher``) over the compiled replay loop ``replay`` (a tape's), or None
    where it cannot be had (then ``p`` itself runs)."""
    from ._native_call import MAX_PTRS, launcher_type

    launcher = launcher_type()
    if launcher is None or p.c_alloc is None or len(p.slots) > MAX_PTRS:
        return None
    alloc, alloc_at = p.c_alloc
    return launcher(p.slots, p.ptr, alloc, alloc_at, p.stream, STATS, "fast_path", LAST, p.route,
                    ctypes.cast(replay, ctypes.c_void_p).value)
