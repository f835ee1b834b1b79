"""``tracea.ops.scaled_gemm``: an 8-bit GEMM with scales on the caller's arrays (kernels/ops/scaled_gemm.py is the
function computed): its arguments checked, its IR value, the kernel where one runs it, the vendor call elsewhere."""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError
from tracea.kernels.dtypes import DType

from .. import _engine, _prepared
from .._arrays import describe, device_ptr, is_torch, overlapping, shown
from .._checks import alpha_value, chain
from .._dispatch import _LAST, EXPLAINING, prepared
from .._engine import STATS, Fallback, Route
from .._prepared import Uncached, array_key, opt

ORDER = 15  # its place in tracea.ops (help, __all__)
NAMES = ("a", "b", "scale_a", "scale_b", "bias", "residual", "scale_out", "amax")  # the call's arrays, as the prepared launch finds the kernel's buffers
__all__ = ["scaled_gemm"]
TORCH_PIECES: tuple[str, ...] = ()

# the 8-bit input types by the name of their array dtype (NumPy's int8; ml_dtypes' and torch's float8)
INPUTS = {"int8": DType.INT8, "float8_e4m3fn": DType.FP8E4M3, "float8_e5m2": DType.FP8E5M2}
OUTPUTS = {"fp32": DType.FP32, "float32": DType.FP32, "bf16": DType.BF16, "bfloat16": DType.BF16,
           "fp16": DType.FP16, "float16": DType.FP16, "int32": DType.INT32, "fp8e4m3": DType.FP8E4M3,
           "float8_e4m3fn": DType.FP8E4M3, "fp8e5m2": DType.FP8E5M2, "float8_e5m2": DType.FP8E5M2}


def scaled_gemm(a: Any, b: Any, scale_a: Any = None, scale_b: Any = None, *, out_dtype: Any = None,
                bias: Any = None, residual: Any = None, epilogue: Any = None, alpha: float = 1.0,
                scale_out: Any = None, amax: Any = None, out: Any = None) -> Any:
    """``(a @ b)`` scaled, for 8-bit ``a`` (m, k) and ``b`` (k, n): int8 NumPy arrays or torch tensors (FP8:
    torch's ``float8_e4m3fn``/``float8_e5m2``). ``b`` as ``torch._scaled_mm`` takes it: ``w.T`` of an
    ``nn.Linear`` weight ``w`` (n, k) is read in place; a row-major (k, n) ``b`` is packed by the kernel.
    ``scale_a``/``scale_b`` (float32): a number or shape (1,) each (per tensor); (m,) or (m, 1) and (n,) or (1, n)
    (per row of ``a`` and column of ``b``); (m, k/128) and (k/128, ceil(n/128)) (``a``'s 1x128 and ``b``'s 128x128
    blocks); or both None for int8's int32 accumulator itself (``torch._int_mm``'s function). ``out_dtype``:
    fp32 (the default with scales), bf16, fp16 or int32 (without), or FP8 (``float8_e4m3fn``/``float8_e5m2``, from
    FP8 inputs): C = saturate(v * ``scale_out``) (a number or a float32 (1,) tensor: cuBLASLt's D scale) and the
    largest |v| written into ``amax`` (a float32 (1,) array beside the operands, where given: the next call's
    scale comes from it). ``bias`` (n,), ``residual`` (m, n) (dense, in C's type; bf16 beside an FP8 C),
    ``epilogue`` and ``alpha`` as ``tracea.ops.gemm`` takes them, applied to the scaled product before
    C's rounding (``torch._scaled_mm``'s ``bias`` is ``bias=``). Returns the same kind of array."""
    key = None
    extras = (bias, residual, epilogue, alpha, scale_out, amax)
    arrays = (a, b, scale_a, scale_b, bias, residual, scale_out, amax)
    if out is None and not EXPLAINING.get():
        key, fast = _call_key(a, b, scale_a, scale_b, out_dtype, extras)
        y = _repeated(fast, key, arrays) if fast is not None else None
        if y is not None:
            return y
    route = Route(op="scaled_gemm")
    _LAST.route = route
    op, feeds = _checked(a, b, scale_a, scale_b, out_dtype, extras)
    result = _new_out(a, op) if out is None else _given_out(out, op, arrays)
    try:
        from tracea.emitters import registry

        backend = _engine.backend_for(describe("a", a).device)  # the backend where the data is, as every op
        on_device = registry.backend(backend).ON_DEVICE
        k = _engine.kernel(op, backend, route, build=not EXPLAINING.get(), on_device=on_device)
        if EXPLAINING.get():
            return route
        if on_device:
            stream = sys.modules["torch"].cuda.current_stream(a.device).cuda_stream
            k.launch_on({**{n: device_ptr(v) for n, v in feeds.items()}, "out": device_ptr(result)}, stream)
            if key is not None and out is None and all(is_torch(v) for v in feeds.values()):
                # later calls of this signature launch on their pointers: the key pinned every check but the
                # scales' finiteness, which a GPU's scales would have to be read back for (not done again)
                _prepared.keep(key, NAMES, arrays, k, feeds, result, result, route, "torch", a.device.index)
        else:
            k({n: _host(v) for n, v in feeds.items()}, out=_host(result))
            if key is not None and len(_prepared.PREPARED) < _prepared.LIMIT and not op.fp8_out:
                _prepared.PREPARED[key] = _Fast(op, k, a)
        STATS["tracea"] += 1
        return result
    except Fallback as fb:
        route.path, route.reason = "fallback", fb.reason
        route.vendor = "the float64 function of the stored values, rounded (NumPy on the host, torch on a device)"
        if EXPLAINING.get():
            return route
        if not _engine.fallback_allowed():
            from tracea.doctor.errors import UnsupportedError

            raise UnsupportedError(f"tracea.ops.scaled_gemm: {fb.reason}",
                                   "tracea.ops.allow_fallback(True) runs the vendor call instead") from None
        STATS["fallbacks"] += 1
        return _vendor(op, feeds, a, result)


def _call_key(a: Any, b: Any, sa: Any, sb: Any, out_dtype: Any, extras: tuple[Any, ...]) -> tuple[Any, Any]:
    """(the call's signature as the prepared calls key it, the prepared call of it or None); (None, None) where an
    argument cannot be held in a key (the checked path says why)."""
    bias, residual, epilogue, alpha, scale_out, amax = extras
    try:
        key = ("scaled_gemm", array_key(a), array_key(b), _scale_key(sa), _scale_key(sb),
               opt(out_dtype) if out_dtype is None or type(out_dtype) is str else (type(out_dtype), str(out_dtype)),
               array_key(bias), array_key(residual), opt(epilogue), opt(alpha), _scale_key(scale_out),
               array_key(amax))
        return key, _prepared.PREPARED.get(key)
    except (Uncached, TypeError, ValueError):
        return None, None


def _repeated(fast: Any, key: tuple[Any, ...], arrays: tuple[Any, ...]) -> Any:
    """A prepared signature's call, or None (the checked path): the host kernel's ``_Fast`` (the scales' values
    checked, the launch on the pointers), or a GPU's ``_prepared.Prepared`` (the launch every op has)."""
    if type(fast) is _Fast:
        return fast(*arrays)
    y = prepared(key, arrays, None)
    return None if y is _prepared.MISS or y is _prepared.RETRY else y


_INT8 = np.dtype(np.int8)


def _dtype_of(name: str, x: Any) -> DType:
    if isinstance(x, np.ndarray) and x.dtype == _INT8:  # the common case, without str(dtype) (microseconds)
        return DType.INT8
    if not (isinstance(x, np.ndarray) or is_torch(x)):
        raise BadInputError(f"{name}: expected a NumPy array or a torch tensor, got {shown(x)}")
    dt = INPUTS.get(str(x.dtype).removeprefix("torch."))
    if dt is None:
        raise BadInputError(f"{name}: dtype {x.dtype} is not an 8-bit type (int8, float8_e4m3fn, float8_e5m2)",
                            "quantize first; float inputs take tracea.ops.gemm")
    return dt


def _numel(x: Any) -> int:
    return int(x.numel()) if is_torch(x) else int(x.size)


def _scales(named: tuple[tuple[str, Any], ...], where: str) -> list[Any]:
    """The scales as float32: NumPy arrays (from numbers, arrays and CPU tensors) beside host operands; tensors on
    ``where``, the operands' device, beside a device's (a GPU's own scales stay there; host ones are checked for
    finiteness here, where reading them is free, and moved there)."""
    out = []
    for name, s in named:
        if is_torch(s):
            if str(s.dtype) != "torch.float32" or not (s.is_cpu or str(s.device) == where):
                raise BadInputError(f"{name}: a float32 tensor on the host or {where} is expected, got {s.dtype} on "
                                    f"{s.device}")
            if not s.is_cpu:
                if not bool(s.isfinite().all()):
                    raise BadInputError(f"{name}: holds a non-finite value; scales must be finite")
                out.append(s.detach().contiguous())
                continue
            s = s.detach().numpy()
        arr = np.asarray(s)
        if arr.dtype != np.float32 and not (arr.ndim == 0 and arr.dtype.kind in "fi"):
            raise BadInputError(f"{name}: float32 scales are expected, got {arr.dtype}")
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if where != "host":
            if not np.isfinite(arr).all():
                raise BadInputError(f"{name}: holds a non-finite value; scales must be finite")
            arr = sys.modules["torch"].as_tensor(arr, device=where)
        out.append(arr)
    return out


def _scale_mode(m: int, n: int, k: int, sa: Any, sb: Any, where: str) -> tuple[str, Any, Any]:
    """The scale mode the scales' shapes say, and the scales in the IR's shapes. One scale for A beside B's per
    column (or A's per row beside one for B: W8A8's usual pair) is the row mode, the single one repeated."""
    if sa is None and sb is None:
        return "none", None, None
    if sa is None or sb is None:
        raise BadInputError("scale_a, scale_b: give both (or neither, for int8's int32 accumulator)")
    a, b = _scales((("scale_a", sa), ("scale_b", sb)), where)
    one_a, one_b = _numel(a) == 1 and a.ndim <= 2, _numel(b) == 1 and b.ndim <= 2
    if one_a and one_b:
        return "tensor", a.reshape(1), b.reshape(1)
    rows_a, cols_b = tuple(a.shape) in ((m,), (m, 1)), tuple(b.shape) in ((n,), (1, n))
    if (rows_a or one_a) and (cols_b or one_b):
        return "row", _spread(a, m), _spread(b, n)
    if a.ndim == 2 and b.ndim == 2 and k % 128 == 0 and tuple(a.shape) == (m, k // 128) \
            and tuple(b.shape) == (k // 128, -(-n // 128)):
        return "block128", a, b
    raise BadInputError(f"scale_a {tuple(a.shape)}, scale_b {tuple(b.shape)}: no scale mode has these shapes for m={m}, "
                        f"n={n}, k={k}", "(1,) and (1,); (m,) or (1,) and (n,) or (1,); or (m, k/128) and (k/128, "
                        "ceil(n/128))")


def _spread(s: Any, size: int) -> Any:
    """A scale of one value, or of ``size``, as ``size`` values."""
    if _numel(s) == size:
        return s.reshape(size)
    return s.reshape(1).expand(size).contiguous() if is_torch(s) else np.full(size, s.reshape(1)[0], np.float32)


def _where(x: Any) -> str:
    return "host" if isinstance(x, np.ndarray) else str(x.device)


def _checked(a: Any, b: Any, sa: Any, sb: Any, out_dtype: Any,
             extras: tuple[Any, ...] = (None, None, None, 1.0, None, None)) -> tuple[Any, dict[str, Any]]:
    da, db = _dtype_of("a", a), _dtype_of("b", b)
    if da is not db:
        raise BadInputError(f"a is {a.dtype} and b is {b.dtype}: both operands take one 8-bit type")
    if isinstance(a, np.ndarray) != isinstance(b, np.ndarray):
        raise BadInputError("a: NumPy arrays and torch tensors mixed in one call")
    if _where(a) != _where(b):
        raise BadInputError(f"a is on {_where(a)} and b on {_where(b)}: both operands on one device")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise BadInputError(f"scaled_gemm: a is {tuple(a.shape)} and b is {tuple(b.shape)}: expected (m, k) and (k, n)")
    (m, k), n = a.shape, b.shape[1]
    mode, sa, sb = _scale_mode(m, n, k, sa, sb, _where(a))
    if isinstance(out_dtype, type):  # numpy.float32 and the like
        out_dtype = np.dtype(out_dtype).name
    key = str(out_dtype).removeprefix("torch.") if out_dtype is not None else ("int32" if mode == "none" else "fp32")
    if key not in OUTPUTS:
        raise BadInputError(f"out_dtype: {shown(out_dtype)} is not one of fp32, bf16, fp16, int32, fp8e4m3, fp8e5m2")
    layout, b_fed = _b_layout(b)
    bias, residual, epilogue, alpha, scale_out, amax = extras
    alpha = alpha_value(alpha)
    chain_ = chain(epilogue, {"bias": bias is not None, "residual": residual is not None}, alpha)
    op = _op(m, n, k, da, OUTPUTS[key], mode, layout, chain_, alpha)
    operands = {n_: _operand(n_, v, want, a, op) for n_, v, want in (("bias", bias, (n,)), ("residual", residual,
                                                                                              (m, n))) if v is not None}
    # a strided view of A is copied (on a GPU the copy is the kernel's buffer: no launch of it is prepared)
    feeds = {"a": _row_major(a), "b": b_fed}
    if mode != "none":
        if isinstance(sa, np.ndarray) and isinstance(sb, np.ndarray):  # (a device's are checked where they are)
            op.check_scales({"scale_a": sa, "scale_b": sb})
        feeds |= {"scale_a": sa, "scale_b": sb}
    return op, feeds | operands | _fp8_out_feeds(op, scale_out, amax, a, (a, b, sa, sb, bias, residual, scale_out))


def _fp8_out_feeds(op: Any, scale_out: Any, amax: Any, a: Any, others: tuple[Any, ...] = ()) -> dict[str, Any]:
    """An FP8 C's ``scale_out`` (float32, finite: checked as the scales are) and ``amax`` (the caller's float32
    (1,) array beside ``a``, or a new one); neither is taken beside another C."""
    if not op.fp8_out:
        if scale_out is not None or amax is not None:
            raise BadInputError(f"scale_out, amax: apply to an FP8 out_dtype (fp8e4m3, fp8e5m2), not {op.out_dtype.value}")
        return {}
    if scale_out is None:
        raise BadInputError(f"scale_out: an FP8 C ({op.out_dtype.value}) is quantized by it; give a number or a float32 "
                            "(1,) tensor", "1.0 keeps the values as they are")
    so = _scales((("scale_out", scale_out),), _where(a))[0]
    if _numel(so) != 1:
        raise BadInputError(f"scale_out: {_numel(so)} values; one scale quantizes the whole C (a number or shape (1,))")
    so = so.reshape(1)
    if isinstance(so, np.ndarray):
        op.check_scales({"scale_out": so})
    if amax is None:
        amax = np.zeros(1, np.float32) if isinstance(a, np.ndarray) else sys.modules["torch"].zeros(1, device=a.device)
    elif not (isinstance(amax, np.ndarray) or is_torch(amax)) or isinstance(amax, np.ndarray) != isinstance(a, np.ndarray) \
            or _where(amax) != _where(a) or tuple(amax.shape) != (1,) or str(amax.dtype).removeprefix("torch.") != "float32":
        raise BadInputError(f"amax: expected a float32 (1,) {type(a).__name__} on {_where(a)}, got {shown(amax)}")
    elif (not amax.flags.writeable if isinstance(amax, np.ndarray) else amax.requires_grad) \
            or any(x is not None and not np.isscalar(x) and overlapping(amax, x) for x in others):
        raise BadInputError("amax: is written by the call: give a writable buffer of its own (not an input's memory, "
                            "not one autograd tracks)")
    return {"scale_out": so, "amax": amax}


def _operand(name: str, v: Any, want: tuple[int, ...], a: Any, op: Any) -> Any:
    """An epilogue operand as the kernel reads it: ``want``'s shape, dense, in ``operand_dtype`` (C's type; bf16
    beside an FP8 C), beside ``a``."""
    if not (isinstance(v, np.ndarray) or is_torch(v)) or isinstance(v, np.ndarray) != isinstance(a, np.ndarray) \
            or (is_torch(v) and _where(v) != _where(a)):
        raise BadInputError(f"{name}: expected a {type(a).__name__} on {_where(a)} like a, got {shown(v)}")
    if tuple(v.shape) != want or not _dense(v):
        raise BadInputError(f"{name}: expected a dense {want} array, got {shown(v)}",
                            "bias has one value per output column; residual is the output's shape")
    if v.dtype != _out_type(a, op, op.operand_dtype):
        raise BadInputError(f"{name}: expected {op.operand_dtype.value} (C's type; bf16 beside an FP8 C), got {v.dtype}")
    return v


@functools.lru_cache(maxsize=256)
def _op(m: int, n: int, k: int, dtype: DType, out: DType, scale: str, layout: str, epilogue: tuple[str, ...] = (),
        alpha: float = 1.0) -> Any:
    """The IR value of a call's signature, validated once (a repeated call skips the checks' microseconds)."""
    from tracea.kernels import ScaledGemm

    return ScaledGemm(m=m, n=n, k=k, dtype=dtype, out_dtype=out, scale=scale, layout_b=layout, epilogue=epilogue,
                      alpha=alpha)


def _dense(x: Any) -> bool:
    return bool(x.flags.c_contiguous) if isinstance(x, np.ndarray) else bool(x.is_contiguous())


def _row_major(x: Any) -> Any:
    """``x`` where it is dense row-major, else a dense copy (the kernels read A densely)."""
    if _dense(x):
        return x
    return np.ascontiguousarray(x) if isinstance(x, np.ndarray) else x.contiguous()


def _b_layout(b: Any) -> tuple[str, Any]:
    """("col", b.T) when b (k, n) is column-major (read in place as n x k), ("row", b) when row-major."""
    bt = b.T if isinstance(b, np.ndarray) else b.t()
    if _dense(bt):
        return "col", bt
    if _dense(b):
        return "row", b
    raise BadInputError("b: neither row- nor column-major (a strided view)", "call .contiguous() on it")


def _host(x: Any) -> np.ndarray:
    """The kernel's NumPy view: int8 as is, float8 and bfloat16 as their bits."""
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "fiu":  # NumPy's own types (int8, float32, float16, int32): as they are
            return x
        return x.view(np.uint8) if x.dtype.itemsize == 1 else x.view(np.uint16)  # ml_dtypes' float8, bfloat16
    torch = sys.modules["torch"]
    x = x.detach()
    if "float8" in str(x.dtype):
        return x.view(torch.uint8).numpy()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


_ML_DTYPES = {DType.BF16: "bfloat16", DType.FP8E4M3: "float8_e4m3fn", DType.FP8E5M2: "float8_e5m2"}


def _out_type(like: Any, op: Any, dtype: DType | None = None) -> Any:
    """The array dtype of C (or of ``dtype``) beside ``like``: ml_dtypes' bf16 and float8 for NumPy arrays."""
    dtype = op.out_dtype if dtype is None else dtype
    if isinstance(like, np.ndarray):
        if dtype in _ML_DTYPES:
            try:
                import ml_dtypes
            except ImportError:
                raise BadInputError(f"out_dtype: {dtype.value} NumPy arrays need ml_dtypes", "pip install ml_dtypes, "
                                    "or ask for fp32") from None
            return getattr(ml_dtypes, _ML_DTYPES[dtype])
        return dtype.storage
    torch = sys.modules["torch"]
    return {DType.FP32: torch.float32, DType.BF16: torch.bfloat16, DType.FP16: torch.float16,
            DType.INT32: torch.int32, DType.FP8E4M3: torch.float8_e4m3fn, DType.FP8E5M2: torch.float8_e5m2}[dtype]


def _new_out(like: Any, op: Any) -> Any:
    if isinstance(like, np.ndarray):
        return np.empty((op.m, op.n), dtype=_out_type(like, op))
    return sys.modules["torch"].empty((op.m, op.n), dtype=_out_type(like, op), device=like.device)


def _given_out(out: Any, op: Any, inputs: tuple[Any, ...]) -> Any:
    like = inputs[0]
    want = _out_type(like, op)
    if type(out) is not type(like) or tuple(out.shape) != (op.m, op.n) or out.dtype != want or not _dense(out) \
            or _where(out) != _where(like):
        raise BadInputError(f"out: expected a dense ({op.m}, {op.n}) {want} {type(like).__name__} on {_where(like)}, "
                            f"got {shown(out)}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise BadInputError("out: is read-only")
    if any(x is not None and not np.isscalar(x) and overlapping(out, x) for x in inputs):
        raise BadInputError("out: overlaps an input; give out= a buffer of its own")
    return out


def _vendor(op: Any, feeds: dict[str, Any], a: Any, result: Any) -> Any:
    """The function in float64 from the stored values (exact until the output's rounding): NumPy's on the host, a
    float64 matmul in torch for tensors on a device."""
    from tracea.kernels.dtypes import to_storage

    torch = sys.modules.get("torch")
    if not isinstance(a, np.ndarray) and not a.is_cpu:
        try:
            return _vendor_on_device(op, feeds, a, result, torch)
        except (RuntimeError, TypeError):  # a device without float64 (MPS): the host's copies below
            pass
    host = {n: v if isinstance(v, np.ndarray) else v.cpu() for n, v in feeds.items()}
    stored = {n: v if isinstance(v, np.ndarray) and v.dtype == np.float32 else _host(v) for n, v in host.items()}
    ref = op.reference(stored)
    for name, value in op.side_reference(stored).items():  # an FP8 C's amax, into the caller's array
        feeds[name][...] = value.astype(np.float32) if isinstance(feeds[name], np.ndarray) else \
            torch.as_tensor(value, dtype=torch.float32)
    if isinstance(result, np.ndarray) or result.is_cpu:
        _host(result)[...] = to_storage(ref, op.out_dtype)
    else:
        kept = torch.empty(result.shape, dtype=result.dtype)
        _host(kept)[...] = to_storage(ref, op.out_dtype)
        result.copy_(kept)
    return result


def _vendor_on_device(op: Any, feeds: dict[str, Any], a: Any, result: Any, torch: Any) -> Any:
    """A float64 matmul in torch where the tensors are (exact until the output's rounding), then the epilogue."""
    x, w = feeds["a"].double(), feeds["b"].double()
    w = w.t() if op.layout_b == "col" else w
    if op.scale == "none":
        y = x @ w
    elif op.scale in ("tensor", "row"):
        sa, sb = (torch.as_tensor(feeds[s], device=a.device).double() for s in ("scale_a", "scale_b"))
        y = (x @ w) * (sa[:, None] if op.scale == "row" else sa) * (sb[None, :] if op.scale == "row" else sb)
    else:
        sa, sb = (torch.as_tensor(feeds[s], device=a.device).double() for s in ("scale_a", "scale_b"))
        y = (x * sa.repeat_interleave(128, 1)) @ (w * sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:, : op.n])
    if op.epilogue:
        from tracea.kernels.epilogue import apply

        from .._vendor import torch_math

        extra = {n: (feeds[n] if feeds[n].dtype != torch.uint16 else feeds[n].view(torch.bfloat16)).double()
                 for n in ("bias", "residual") if n in feeds}
        y = apply(op.epilogue, y, extra, op.alpha, torch_math())
    if op.fp8_out:  # the amax before the scale, then saturated as the kernel stores
        feeds["amax"].copy_(y.abs().max().reshape(1))
        top = op.out_dtype.max_finite
        y = (y * feeds["scale_out"].double()).clamp(-top, top)
    result.copy_(y.round() if op.out_dtype is DType.INT32 else y)
    return result


def _scale_key(s: Any) -> Any:
    """A scale as a call's key holds it: an array's type, dtype, shape and strides; a number's type."""
    if s is None or isinstance(s, (float, int, np.floating)):
        return None if s is None else type(s)
    return array_key(s)


class _Fast:
    """A repeated call of a signature whose first call ran the host kernel: the key held every check's inputs (types,
    dtypes, shapes, strides), so what is left is the scales' values (finite, else the checked path says why), the
    result and the launch on the pointers. Anything else returns None: the checked path."""

    def __init__(self, op: Any, kernel: Any, like: Any) -> None:
        self.op, self.kernel, self.numpy = op, kernel, isinstance(like, np.ndarray)
        self.col = op.layout_b == "col"
        self.shapes = op.scale_shapes()

    def _scale(self, name: str, s: Any) -> np.ndarray | None:
        x = np.ascontiguousarray(s if self.numpy or not is_torch(s) else s.detach().numpy(), dtype=np.float32)
        if not np.isfinite(x).all():
            return None
        want = self.shapes[name]
        return x.reshape(want) if len(want) == 2 else _spread(x, want[0])  # as the checked path shapes them

    def __call__(self, a: Any, b: Any, sa: Any, sb: Any, bias: Any = None, residual: Any = None, *_fp8: Any) -> Any:
        op = self.op
        if not self.numpy:
            a, b = a.detach(), b.detach()
        a = _row_major(a)  # as the checked path feeds it (the key pins the strides: every call of it is alike)
        bt = b.T if self.numpy else b.t()
        arrays = [a, bt if self.col else b]
        if op.scale != "none":
            xs = [self._scale("scale_a", sa), self._scale("scale_b", sb)]
            if xs[0] is None or xs[1] is None:
                return None
            arrays += xs
        if not self.numpy:
            bias, residual = (None if x is None else x.detach() for x in (bias, residual))
        arrays += [x for x in (bias, residual) if x is not None]  # (the key pinned their types, shapes and strides)
        result = _new_out(a, op)
        ptrs = [x.__array_interface__["data"][0] if isinstance(x, np.ndarray) else x.data_ptr() for x in arrays]
        ptrs.append(result.__array_interface__["data"][0] if self.numpy else result.data_ptr())
        self.kernel.launch_ptrs(tuple(ptrs))
        STATS["fast_path"] += 1
        return result
