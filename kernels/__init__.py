"""Tracea's L2 core IR: operations as frozen values (Gemm, Conv2d, Softmax) with validation, FLOP and
byte counts, fresh random inputs and float64 NumPy references."""

from .dtypes import DType, parse_dtype
from .ops import OPS, Conv2d, Gemm, Op, Softmax, relative_error, tolerance

__all__ = ["DType", "parse_dtype", "OPS", "Conv2d", "Gemm", "Op", "Softmax", "relative_error", "tolerance"]
