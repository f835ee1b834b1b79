"""An op's fields, checked: the size limits every op shares and the checks that raise ``BadInputError``
naming the field, so ``tracea bench gemm --m 0`` stops with one line before anything is built; and the
fresh random inputs every op draws (never zeros)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from .dtypes import DType, to_storage

MAX_DIM = 2**31 - 1  # kernels index with 32-bit signed ints per dimension
MAX_ELEMENTS = 2**40  # per tensor: far beyond any device, small enough for 64-bit offsets


def positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise BadInputError(f"{name}: expected a positive integer, got {value!r}")
    if value <= 0:
        raise BadInputError(f"{name}: must be positive, got {value}")
    if value > MAX_DIM:
        raise BadInputError(f"{name}: {value} exceeds the largest supported size {MAX_DIM}")
    return int(value)


def non_negative(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0 or value > MAX_DIM:
        raise BadInputError(f"{name}: expected a non-negative integer, got {value!r}")
    return int(value)


def elements(name: str, *dims: int) -> int:
    count = math.prod(dims)
    if count > MAX_ELEMENTS:
        raise BadInputError(f"{name}: {' x '.join(map(str, dims))} = {count} elements is too large (max {MAX_ELEMENTS})")
    return count


def pair(name: str, value: Any, check, parts: str = "(h, w)") -> tuple[int, int]:
    """One integer for both, or two (``parts`` names them in the error), each through ``check``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise BadInputError(f"{name}: expected one integer or two {parts}, got {value!r}")
        return check(f"{name}[0]", value[0]), check(f"{name}[1]", value[1])
    v = check(name, value)
    return v, v


def random(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType, scale: float = 1.0) -> np.ndarray:
    """Normal values in ``dtype``'s storage: signs mixed, magnitudes that keep fp16 sums in range, and never a
    zero. NumPy's float32 normals are exactly 0.0 about once in 2^23 draws (a 4096-element operand in one
    run of 2000), and a tiny one rounds to 0 in a 16-bit type; each such element becomes ``scale / 256``, so
    a kernel that skips or loses an element still shows in the output. The draws are otherwise unchanged."""
    x = to_storage(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale), dtype)
    zero = (x & 0x7FFF) == 0 if x.dtype == np.uint16 else x == 0  # bf16 bits: +0 and -0
    if zero.any():
        x[zero] = to_storage(np.full(int(zero.sum()), np.float32(scale) / 256, np.float32), dtype)
    return x
