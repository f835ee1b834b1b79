"""Element types of the IR. 16-bit inputs accumulate in fp32.

NumPy has no bfloat16, so a bf16 array is held as its raw bits in ``uint16`` (the same bytes a
kernel reads); ``to_float64`` decodes any storage array to exact float64 values for references.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from tracea.doctor.errors import BadInputError


class DType(str, Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"

    @property
    def itemsize(self) -> int:
        return 4 if self is DType.FP32 else 2

    @property
    def storage(self) -> np.dtype:
        """The NumPy dtype that holds this type's bytes."""
        return {DType.FP32: np.dtype(np.float32), DType.FP16: np.dtype(np.float16), DType.BF16: np.dtype(np.uint16)}[self]

    @property
    def c_name(self) -> str:
        return {DType.FP32: "float", DType.FP16: "_Float16", DType.BF16: "uint16_t"}[self]

    @property
    def unit_roundoff(self) -> float:
        return {DType.FP32: 2.0**-24, DType.FP16: 2.0**-11, DType.BF16: 2.0**-8}[self]


ALIASES = {
    "fp32": DType.FP32, "f32": DType.FP32, "float32": DType.FP32, "float": DType.FP32,
    "fp16": DType.FP16, "f16": DType.FP16, "float16": DType.FP16, "half": DType.FP16,
    "bf16": DType.BF16, "bfloat16": DType.BF16,
}

# Element types the IR does not compute in, whose size a shared-memory layout still needs (``tracea bank-sim
# --dtype``). The IR's own types are not here: their size is ``DType.itemsize``, by any of their ALIASES.
STORAGE_ONLY_BYTES: dict[str, int] = {
    "fp8": 1, "e4m3": 1, "e5m2": 1, "int8": 1, "uint8": 1, "int16": 2,
    "tf32": 4, "int32": 4, "fp64": 8, "f64": 8, "int64": 8,
}
ELEMENT_NAMES: tuple[str, ...] = (*ALIASES, *STORAGE_ONLY_BYTES)  # every name element_bytes knows


def element_bytes(name: str | DType) -> int | None:
    """Bytes per element of the type ``name``: an IR type by any of its names (``DType.itemsize``) or a type
    the IR only stores (``STORAGE_ONLY_BYTES``); None for a name neither knows. The one table of element
    sizes: emitters and commands ask here rather than keep their own."""
    if isinstance(name, DType):
        return name.itemsize
    key = str(name).strip().lower()
    dtype = ALIASES.get(key)
    return dtype.itemsize if dtype is not None else STORAGE_ONLY_BYTES.get(key)


def parse_dtype(value: str | DType, field: str = "dtype") -> DType:
    if isinstance(value, DType):
        return value
    dtype = ALIASES.get(str(value).strip().lower())
    if dtype is None:
        raise BadInputError(f"{field}: unknown type {value!r}; use fp32, fp16 or bf16")
    return dtype


def bf16_from_float(x: np.ndarray) -> np.ndarray:
    """float32 values -> bf16 bits, rounded to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_storage(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Real values -> this type's storage array (rounded as the hardware would)."""
    if dtype is DType.BF16:
        return bf16_from_float(np.asarray(x, dtype=np.float32))
    return np.ascontiguousarray(x, dtype=dtype.storage)


def to_float64(x: np.ndarray, dtype: DType) -> np.ndarray:
    """A storage array -> its exact values in float64."""
    if dtype is DType.BF16:
        return bf16_to_float32(x).astype(np.float64)
    return np.asarray(x, dtype=np.float64)
