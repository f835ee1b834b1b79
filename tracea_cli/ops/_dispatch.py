"""The one path every op function takes: check the arguments, build the op's IR value, route it
(_engine), run the kernel on the caller's buffers or the vendor call, and remember the route for
``explain``."""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from typing import Any

from tracea.doctor.errors import BadInputError, TraceaError, UnsupportedError

from . import _engine
from ._arrays import Arg, check_out, device_ptr, empty_like, host_view
from ._engine import STATS, Fallback, Route

EXPLAINING: contextvars.ContextVar[bool] = contextvars.ContextVar("tracea_ops_explaining", default=False)
_LAST = threading.local()


def last_route() -> Route | None:
    return getattr(_LAST, "route", None)


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
        notes: Callable[[Route], list[str]] | None = None, out_channels_last: bool = False) -> Any:
    """``plan()`` -> (op, {buffer name: object the kernel reads}) or Fallback; ``kernel_out(result)``: the
    object the kernel writes into (a reshaped or permuted view); ``alloc()``: a new result; ``notes(route)``:
    what explain adds to a kernel route (a cost the caller can avoid); ``out_channels_last``: ``out`` must be
    dense in channels_last memory (the kernel writes NHWC into it)."""
    route = Route(op=name)
    _LAST.route = route
    first = next(iter(args.values()))
    explaining = EXPLAINING.get()
    if out is not None:
        check_out(out, first, out_shape, out_channels_last)  # a bad out is the caller's error on either path
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
            route.notes.extend(notes(route))
        if explaining:
            return route
        result = out if out is not None else (alloc() if alloc else empty_like(first, out_shape))
        try:
            _launch(k, backend, first, feeds, kernel_out(result))
        except TraceaError as exc:  # e.g. a buffer TMA cannot address (a view 8 bytes into its storage)
            raise Fallback(f"the kernel refused these buffers ({exc.message.splitlines()[0]})") from None
        STATS["tracea"] += 1
        return result
    except Fallback as fb:
        route.path, route.reason = "fallback", fb.reason
        route.vendor = _vendor_name(first.kind, vendor_names)
        route.backend = route.variant = route.schedule_source = route.schedule = route.kernel = None
        route.in_process = route.build_cache_hit = None
        if explaining:
            return route
        if not _engine.fallback_allowed():
            raise UnsupportedError(f"tracea.ops.{name}: {fb.reason}",
                                   "tracea.ops.allow_fallback(True) runs the vendor call instead") from None
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
    torch = sys.modules["torch"]
    stream = torch.cuda.current_stream(first.obj.device).cuda_stream
    k.launch_on({**{n: device_ptr(obj) for n, obj in feeds.items()}, "out": device_ptr(out)}, stream)

