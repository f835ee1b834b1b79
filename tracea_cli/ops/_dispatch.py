"""The one path every op function takes: check the arguments, build the op's IR value, route it
(_engine), run the kernel on the caller's buffers or the vendor call, and remember the route for
``explain``."""

from __future__ import annotations

import contextvars
import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

from tracea.doctor.errors import BadInputError, TraceaError, UnsupportedError

from . import _engine, _prepared
from ._arrays import Arg, check_out, device_ptr, empty_like, host_view, overlapping
from ._engine import STATS, Fallback, Route
from ._prepared import MISS, RETRY

EXPLAINING: contextvars.ContextVar[bool] = contextvars.ContextVar("tracea_ops_explaining", default=False)
_LAST = _engine.LAST
# (key, the call's array names, the arrays): what a slow call that ran a kernel prepares (_prepared.keep)
Fast = tuple[tuple[Any, ...] | None, tuple[str, ...], tuple[Any, ...]]


def last_route() -> Route | None:
    """This thread's last route, a copy (a prepared call's route is shared by every call of its signature)."""
    route = getattr(_LAST, "route", None)
    return None if route is None else dataclasses.replace(route, notes=list(route.notes))


def prepared(key: tuple[Any, ...] | None, arrays: tuple[Any, ...], out: Any) -> Any:
    """Every op function's fast path: the prepared launch of this call's signature ``key`` (built by the op
    from _prepared's array_key, opt, mask_key and out_key; None where they raised Uncached) when an earlier
    call made one, else ``MISS`` (the op's checks and ``run``, which prepares ``key`` when a kernel ran) or
    ``RETRY`` (the same, preparing nothing: a key that cannot be one, or a prepared launch that failed). The
    key is the op's own expression and no closure is made here: this runs at every call (a generic key loop
    cost a third of a microsecond more)."""
    if key is None:
        return RETRY
    try:
        p = _prepared.PREPARED.get(key)
    except TypeError:  # an unhashable option
        return RETRY
    if p is None or EXPLAINING.get():
        return MISS
    fast = p.fast
    if fast is None or out is not None:
        return p(arrays, out)
    try:
        y = fast(arrays)
    except TraceaError:  # a driver call failed: the slow path says what it does with that
        return RETRY
    return p.finish(y) if type(y) is tuple else y


def numpy_dtypes(args: dict[str, Arg]) -> None:
    """NumPy arrays of a type no path computes faithfully are refused before anything else, by the call and
    by ``explain`` alike: the kernels take float32, float16 and bfloat16, and the NumPy fallback computes in
    real float64 (a complex array would lose its imaginary part, an integer one would round). torch tensors
    of such types fall back to torch's own op, which computes them exactly."""
    for n, a in args.items():
        kind = a.obj.dtype.kind if a.kind == "numpy" else None
        if kind is not None and kind != "f" and a.dtype_name != "bfloat16":
            what = "complex" if kind == "c" else a.dtype_name
            raise BadInputError(f"{n}: {what} arrays are not taken (the kernels compute float32, float16 and "
                                "bfloat16, and the NumPy fallback real float64)",
                                "convert with .astype(numpy.float32); for complex data, pass the real and "
                                "imaginary parts as separate real arrays")


def fallback_memory(name: str, args: dict[str, Arg], out_shape: tuple[int, ...]) -> None:
    """The NumPy fallback computes in float64 on copies of its operands (a broadcast view is copied whole):
    an UnsupportedError saying how much, before a MemoryError would."""
    from tracea.kernels.footprint import GIB, available_bytes

    need = 8 * (sum(math.prod(a.shape) for a in args.values()) + 2 * math.prod(out_shape))
    if need > 64 * 2**20 and need > available_bytes():
        raise UnsupportedError(f"tracea.ops.{name}: the NumPy fallback computes in float64 and would need "
                               f"{need / GIB:.1f} GiB for these operands (a broadcast or strided view is copied "
                               f"whole), the machine has {available_bytes() / GIB:.1f} GiB available",
                               "pass dense float32 arrays the kernels take, or smaller ones")


def common_checks(args: dict[str, Arg]) -> Arg:
    """What every op needs of its array arguments; returns the first. BadInputError for mixing NumPy with
    torch; Fallback for what the kernels do not take (devices, dtypes, strides, autograd)."""
    items = list(args.items())
    first = items[0][1]
    kinds = {a.kind for _, a in items}
    if len(kinds) > 1:
        raise BadInputError(f"{items[0][0]}: NumPy arrays and torch tensors mixed in one call",
                            "convert with torch.from_numpy(...) or tensor.numpy()")
    wheres = {a.where for _, a in items}
    if len(wheres) > 1:
        raise Fallback(f"inputs on different devices ({', '.join(sorted(wheres))})")
    lazy = [n for n, a in items if a.lazy]
    if lazy:
        raise Fallback(f"{', '.join(lazy)} carries torch's lazy negative or conjugate bit (its memory is not its "
                       "value; .resolve_neg() / .resolve_conj() makes it so)")
    grads = [n for n, a in items if a.grad]
    if grads:
        raise Fallback(f"autograd: {', '.join(grads)} requires grad and Tracea kernels have no backward pass "
                       "(run under torch.no_grad() or torch.inference_mode() for the kernel)")
    for n, a in items:
        if a.dtype is None:
            raise Fallback(f"dtype {a.dtype_name} of {n} is not served by the kernels (float32, float16, bfloat16)")
    dtypes = {a.dtype_name for _, a in items}
    if len(dtypes) > 1:
        raise Fallback(f"mixed dtypes ({', '.join(sorted(dtypes))})")
    strided = [n for n, a in items if not a.contiguous]
    if strided:
        raise Fallback(f"{', '.join(strided)} not contiguous (the kernels read dense row-major buffers; "
                       "Tracea does not copy behind your back: call .contiguous() to run the kernel)")
    return first


def _vendor_name(kind: str, names: dict[str, str]) -> str:
    return names["numpy" if kind == "numpy" else "torch"]


def run(name: str, args: dict[str, Arg], plan: Callable[[], tuple[Any, dict[str, Any]]],
        out: Any, out_shape: tuple[int, ...], vendor: Callable[[], Any], vendor_names: dict[str, str],
        kernel_out: Callable[[Any], Any] = lambda o: o, alloc: Callable[[], Any] | None = None,
        notes: Callable[[Route], list[str]] | None = None, out_channels_last: bool = False,
        fast: Fast | None = None) -> Any:
    """``plan()`` -> (op, {buffer name: object the kernel reads}) or Fallback; ``kernel_out(result)``: the
    object the kernel writes into (a reshaped or permuted view); ``alloc()``: a new result; ``notes(route, op)``:
    what explain adds to a kernel route (a cost the caller can avoid); ``out_channels_last``: ``out`` must be
    dense in channels_last memory (the kernel writes NHWC into it); ``fast``: what a call that runs a kernel
    prepares, so that the next call of its signature takes the fast path (_prepared.py)."""
    route = Route(op=name)
    _LAST.route = route
    first = next(iter(args.values()))
    explaining = EXPLAINING.get()
    if not explaining:
        STATS["slow_path"] += 1
    numpy_dtypes(args)
    if out is not None:
        _check_given_out(out, first, args, out_shape, out_channels_last)
    if out_shape and math.prod(out_shape) == 0:  # nothing to compute: an empty result, as NumPy and torch give
        route.path, route.reason = "empty", "the result has no elements: nothing is computed"
        if explaining:
            return route
        return out if out is not None else (alloc() if alloc else empty_like(first, out_shape))
    try:
        first = common_checks(args)
        op, feeds = plan()
        if first.device == "cuda" and (first.index or 0) != 0:
            raise Fallback(f"the tensors are on {first.where}; Tracea's CUDA kernels run on cuda:0 for now")
        backend = _engine.backend_for(first.device)
        from tracea.emitters import registry

        on_device = registry.backend(backend).ON_DEVICE
        k = _engine.kernel(op, backend, route, build=not explaining, on_device=on_device)
        if notes is not None:
            route.notes.extend(notes(route, op))
        if explaining:
            return route
        result = out if out is not None else (alloc() if alloc else empty_like(first, out_shape))
        written = kernel_out(result)
        try:
            _launch(k, backend, first, feeds, written)
        except TraceaError as exc:  # e.g. a buffer TMA cannot address (a view 8 bytes into its storage)
            raise Fallback(f"the kernel refused these buffers ({exc.message.splitlines()[0]})") from None
        STATS["tracea"] += 1
        if fast is not None:
            _prepared.keep(fast[0], fast[1], fast[2], k, feeds, written, result, route, first.kind, first.index)
        return result
    except Fallback as fb:
        route.path, route.reason = "fallback", fb.reason
        route.vendor = _vendor_name(first.kind, vendor_names)
        route.backend = route.variant = route.schedule_source = route.schedule = route.kernel = None
        route.in_process = route.build_cache_hit = None
        if explaining:
            return route
        return _vendor_call(name, fb, first, args, out, out_shape, vendor)


def _check_given_out(out: Any, first: Arg, args: dict[str, Arg], out_shape: tuple[int, ...],
                     channels_last: bool) -> None:
    """A given ``out`` is the caller's error on either path: its type, shape, dtype, device and layout, and
    no overlap with an input."""
    check_out(out, first, out_shape, channels_last)
    for n, a in args.items():
        if overlapping(out, a.obj):
            raise BadInputError(f"out: overlaps the input {n!r}; the kernel would read what it writes",
                                "give out= a buffer of its own")


def _vendor_call(name: str, fb: Fallback, first: Arg, args: dict[str, Arg], out: Any, out_shape: tuple[int, ...],
                 vendor: Callable[[], Any]) -> Any:
    """The vendor call where the kernels do not take the call (or the reason, under ``allow_fallback(False)``),
    its result written into ``out`` where one was given."""
    if not _engine.fallback_allowed():
        raise UnsupportedError(f"tracea.ops.{name}: {fb.reason}",
                               "tracea.ops.allow_fallback(True) runs the vendor call instead") from None
    if first.kind == "numpy":
        fallback_memory(name, args, out_shape)
    result = vendor()
    STATS["fallbacks"] += 1
    if out is None:
        return result
    if first.kind == "numpy":
        out[...] = result
    else:
        out.copy_(result)
    return out


def _launch(k: Any, backend: str, first: Arg, feeds: dict[str, Any], out: Any) -> None:
    from tracea.emitters import registry

    if not registry.backend(backend).ON_DEVICE:
        inputs = {n: host_view(first, obj) for n, obj in feeds.items()}
        k(inputs, out=host_view(first, out))
        return
    on_tensors = getattr(k, "launch_tensors", None)
    if on_tensors is not None:  # a device whose API takes the tensors themselves (torch's own stream, in order)
        on_tensors(feeds, out)
        return
    torch = sys.modules["torch"]
    stream = torch.cuda.current_stream(first.obj.device).cuda_stream
    k.launch_on({**{n: device_ptr(obj) for n, obj in feeds.items()}, "out": device_ptr(out)}, stream)

