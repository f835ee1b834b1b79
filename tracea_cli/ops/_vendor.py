"""What the vendor fallbacks of ``tracea.ops`` share (each op's own is in its file of ``_functions/``, named
``fallback``): torch's own ops for torch tensors, NumPy in float64 (reference quality, rounded to the input's
dtype at the end) for NumPy arrays. Same semantics as the kernels: the epilogue vocabulary of
kernels/epilogue.py."""

from __future__ import annotations

import sys

import numpy as np

from tracea.doctor.errors import BadInputError
from tracea.kernels.epilogue import ArrayMath


def f64(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "fc" and x.dtype.name != "bfloat16":
        raise BadInputError(f"expected floating-point arrays, got {x.dtype}", "convert with .astype(numpy.float32)")
    return np.asarray(x, dtype=np.float64)


def back(y: np.ndarray, like: np.ndarray) -> np.ndarray:
    return y.astype(like.dtype)


def torch_math() -> ArrayMath:
    torch = sys.modules["torch"]
    gelu = torch.nn.functional.gelu
    return ArrayMath(add=lambda c, x: c + x, mul=lambda c, a: c * a,
                     unary={"relu": torch.relu, "gelu": lambda c: gelu(c, approximate="tanh")})
