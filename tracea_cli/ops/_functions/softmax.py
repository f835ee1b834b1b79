"""``tracea.ops.softmax``: its arguments checked, its IR value, its vendor fallback (``fallback``)."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from .._arrays import describe, shown
from .._checks import ir
from .._dispatch import prepared, run
from .._engine import Fallback
from .._prepared import MISS, RETRY, Uncached, array_key, opt, out_key
from .._vendor import back, f64

ORDER = 30  # its place in tracea.ops (help, __all__)
__all__ = ["softmax"]
# its PyTorch pieces (in _torch/softmax.py, which imports torch), offered by tracea.ops where torch is installed
TORCH_PIECES: tuple[str, ...] = ()


def softmax(x: Any, dim: int = -1, out: Any = None) -> Any:
    """Numerically stable softmax over ``dim``; the kernel reduces the last axis (any leading shape)."""
    try:
        key = ("softmax", array_key(x), dim if type(dim) is int else opt(dim), None if out is None else out_key(out))
    except Uncached:
        key = None
    y = prepared(key, (x,), out)
    if y is MISS or y is RETRY:
        return _softmax(x, dim, out, key if y is MISS else None)
    return y


def _softmax(x: Any, dim: Any, out: Any, key: tuple[Any, ...] | None) -> Any:
    args = {"x": describe("x", x)}
    shape = args["x"].shape
    if not shape:
        raise BadInputError("softmax: x must have at least one dimension", "a scalar's softmax is 1")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -len(shape) <= dim < len(shape):
        raise BadInputError(f"softmax: dim {shown(dim)} is out of range for {len(shape)}-D x",
                            f"use -{len(shape)} .. {len(shape) - 1}")
    dim = int(dim) % len(shape)
    cols = shape[-1]
    rows = math.prod(shape[:-1])

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Softmax

        if dim != len(shape) - 1:
            raise Fallback(f"softmax over dim {dim}, not the last: the kernel reduces rows")
        op = ir(lambda: Softmax(rows=rows, cols=cols, dtype=args["x"].dtype))
        return op, {"x": x.reshape(rows, cols)}

    vendor = {"numpy": "NumPy softmax in float64", "torch": "torch.softmax"}
    return run("softmax", args, plan, out, shape, lambda: fallback(x, dim), vendor,
               kernel_out=lambda o: o.reshape(rows, cols), fast=(key, ("x",), (x,)))




def fallback(x: Any, dim: int) -> Any:
    if isinstance(x, np.ndarray):
        v = f64(x)
        e = np.exp(v - v.max(axis=dim, keepdims=True))
        return back(e / e.sum(axis=dim, keepdims=True), x)
    return sys.modules["torch"].softmax(x, dim)


