"""Tracea's L2 core IR: operations as frozen values (Gemm, Conv2d, Softmax, Attention) with validation, FLOP
and byte counts, fresh random inputs and float64 NumPy references."""

from .attention import Attention
from .dtypes import DType, parse_dtype
from .ops import OP_ALIASES, OPS, Conv2d, Gemm, Op, Softmax, canonical_op_name, relative_error, tolerance

__all__ = ["DType", "parse_dtype", "OPS", "OP_ALIASES", "Attention", "Conv2d", "Gemm", "Op", "Softmax",
           "canonical_op_name", "relative_error", "tolerance"]
