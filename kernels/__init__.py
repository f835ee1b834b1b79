"""Tracea's L2 core IR: operations as frozen values (one file each in ``ops/``: Gemm, Conv2d, Softmax,
Attention, and any op added there) with validation, FLOP and byte counts, fresh random inputs and float64
NumPy references."""

from .dtypes import DType, parse_dtype
from .op import OP_ALIASES, OPS, Op, Suite, canonical_op_name, relative_error, tolerance
from .ops import CLASSES

globals().update(CLASSES)

__all__ = ["DType", "parse_dtype", "OPS", "OP_ALIASES", "Op", "Suite", "canonical_op_name", "relative_error",
           "tolerance", *CLASSES]
