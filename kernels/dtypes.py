"""Element types of the IR. 16-bit inputs accumulate in fp32; 8-bit ones (``QUANTIZED``: int8, and the two FP8
formats of Hopper's tensor cores, e4m3 and e5m2 as OCP's FP8 spec and NVIDIA's ``__nv_fp8_e4m3``/``e5m2`` define
them) come with scales (``kernels/ops/scaled_gemm.py``) and accumulate in int32 or fp32.

NumPy has no bfloat16 or FP8, so such an array is held as its raw bits (``uint16``, ``uint8``: the same bytes a
kernel reads); ``to_float64`` decodes any storage array to exact float64 values for references, and
``to_storage`` rounds real values into a type as the hardware does: to nearest even, and for the 8-bit types
saturated to the type's finite range (PTX's ``cvt.satfinite``, the clamp quantization recipes apply).
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from tracea.doctor.errors import BadInputError


class DType(str, Enum):
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    FP8E4M3 = "fp8e4m3"
    FP8E5M2 = "fp8e5m2"
    INT32 = "int32"

    @property
    def itemsize(self) -> int:
        return _FACTS[self][0]

    @property
    def storage(self) -> np.dtype:
        """The NumPy dtype that holds this type's bytes."""
        return np.dtype(_FACTS[self][1])

    @property
    def c_name(self) -> str:
        return _FACTS[self][2]

    @property
    def unit_roundoff(self) -> float:
        """Half an ulp relative to the value, for a float type; 0 for an integer type (exact where it holds)."""
        return _FACTS[self][3]

    @property
    def max_finite(self) -> float:
        """The largest finite value the type holds."""
        return _FACTS[self][4]

    @property
    def is_integer(self) -> bool:
        return self in (DType.INT8, DType.INT32)


# type -> (bytes, NumPy storage, C storage type, unit roundoff, largest finite value)
_FACTS: dict[DType, tuple[int, str, str, float, float]] = {
    DType.FP32: (4, "float32", "float", 2.0**-24, float(np.finfo(np.float32).max)),
    DType.FP16: (2, "float16", "_Float16", 2.0**-11, 65504.0),
    DType.BF16: (2, "uint16", "uint16_t", 2.0**-8, float.fromhex("0x1.fep127")),
    DType.INT8: (1, "int8", "int8_t", 0.0, 127.0),
    DType.FP8E4M3: (1, "uint8", "uint8_t", 2.0**-4, 448.0),
    DType.FP8E5M2: (1, "uint8", "uint8_t", 2.0**-3, 57344.0),
    DType.INT32: (4, "int32", "int32_t", 0.0, float(2**31 - 1)),
}
FLOAT = (DType.FP32, DType.FP16, DType.BF16)  # what every op computes in (the ``dtype`` of a Gemm, a Conv2d, ...)
QUANTIZED = (DType.INT8, DType.FP8E4M3, DType.FP8E5M2)  # 8-bit inputs: a scaled GEMM's (with scales)


ALIASES = {
    "fp32": DType.FP32, "f32": DType.FP32, "float32": DType.FP32, "float": DType.FP32,
    "fp16": DType.FP16, "f16": DType.FP16, "float16": DType.FP16, "half": DType.FP16,
    "bf16": DType.BF16, "bfloat16": DType.BF16,
    "int8": DType.INT8, "i8": DType.INT8, "s8": DType.INT8,
    "fp8e4m3": DType.FP8E4M3, "e4m3": DType.FP8E4M3, "fp8_e4m3": DType.FP8E4M3, "float8_e4m3fn": DType.FP8E4M3,
    "fp8e5m2": DType.FP8E5M2, "e5m2": DType.FP8E5M2, "fp8_e5m2": DType.FP8E5M2, "float8_e5m2": DType.FP8E5M2,
    "int32": DType.INT32, "i32": DType.INT32, "s32": DType.INT32,
}

# Element types the IR does not compute in, whose size a shared-memory layout still needs (``tracea bank-sim
# --dtype``). The IR's own types are not here: their size is ``DType.itemsize``, by any of their ALIASES.
STORAGE_ONLY_BYTES: dict[str, int] = {
    "fp8": 1, "uint8": 1, "int16": 2, "tf32": 4, "fp64": 8, "f64": 8, "int64": 8,
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


def parse_dtype(value: str | DType, field: str = "dtype", allowed: tuple[DType, ...] = FLOAT) -> DType:
    """``value`` as a DType, one of ``allowed`` (the float types unless the caller says): a name no type has, or
    a type the field does not take, is one line naming both."""
    dtype = value if isinstance(value, DType) else ALIASES.get(str(value).strip().lower())
    if dtype is not None and dtype in allowed:
        return dtype
    names = ", ".join(d.value for d in allowed)
    if dtype is None:
        raise BadInputError(f"{field}: unknown type {value!r}; use {names}")
    hint = " (8-bit inputs take scales: `tracea bench scaled_gemm --dtype int8`)" if dtype in QUANTIZED else ""
    raise BadInputError(f"{field}: {dtype.value} is not taken here; use {names}{hint}")


def bf16_from_float(x: np.ndarray) -> np.ndarray:
    """float32 values -> bf16 bits, rounded to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded).astype(np.uint16)


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _fp8_values(dtype: DType) -> np.ndarray:
    """The float64 value of each of the 256 codes of an FP8 type (NaN where a code is one; e5m2 has infinities)."""
    man_bits, bias = (3, 7) if dtype is DType.FP8E4M3 else (2, 15)
    codes = np.arange(256)
    exp, man = (codes >> man_bits) & ((1 << (7 - man_bits)) - 1), codes & ((1 << man_bits) - 1)
    frac = man / (1 << man_bits)
    mag = np.where(exp == 0, frac * 2.0 ** (1 - bias), (1 + frac) * 2.0 ** (exp - bias))
    top = (1 << (7 - man_bits)) - 1
    if dtype is DType.FP8E4M3:  # e4m3fn: no infinities; S.1111.111 is NaN
        mag = np.where((exp == top) & (man == 7), np.nan, mag)
    else:  # IEEE-like: an all-ones exponent is infinity (mantissa 0) or NaN
        mag = np.where(exp == top, np.where(man == 0, np.inf, np.nan), mag)
    return np.where(codes & 0x80, -mag, mag)


FP8_VALUES = {d: _fp8_values(d) for d in (DType.FP8E4M3, DType.FP8E5M2)}


def fp8_from_float(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Real values -> FP8 codes, to nearest (ties to the even code), saturated to the largest finite value (an
    infinity too); NaN stays NaN. On the float64 bits, as hardware converters do: rounding half to even at the
    type's last mantissa bit is an integer add (a carry moves into the exponent), the code is the rebiased exponent
    and the kept mantissa bits; magnitudes under the smallest normal are counted in subnormal steps instead."""
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    man_bits, bias = (3, 7) if dtype is DType.FP8E4M3 else (2, 15)
    mag = np.abs(x)
    np.minimum(mag, dtype.max_finite, out=mag)  # (NaN stays NaN, and is set below)
    shift = 52 - man_bits
    u = mag.view(np.uint64)
    u = u + ((u >> np.uint64(shift)) & np.uint64(1)) + np.uint64((1 << (shift - 1)) - 1)
    u >>= np.uint64(shift)  # exponent and kept mantissa bits, rounded
    code = (u - np.uint64((1023 - bias) << man_bits)).astype(np.uint8)
    sub = mag < 2.0 ** (1 - bias)
    if sub.any():  # 0 .. 2^man_bits steps of the subnormal quantum (2^man_bits: the smallest normal's code)
        code[sub] = np.rint(mag[sub] * 2.0 ** (bias - 1 + man_bits)).astype(np.uint8)
    code[np.signbit(x)] |= np.uint8(0x80)
    code[np.isnan(x)] = np.uint8(0x7F)
    return code.reshape(shape)


def poison(storage: np.dtype) -> float | int:
    """A value no kernel writes by chance, to fill an output before a call (every element must be written): NaN
    for float storage, a NaN's bits for bf16 (0x7FC0) and FP8 (0x7F: NaN in e4m3 and e5m2), and the same bits in
    an int8 or int32 output (127 is int8's saturation value: there the poison shows only as a wrong value)."""
    if storage.kind == "f":
        return float("nan")
    return 0x7F if storage.itemsize == 1 else 0x7FC0


def to_storage(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Real values -> this type's storage array (rounded as the hardware would; 8-bit and int32 saturated)."""
    if dtype is DType.BF16:
        return bf16_from_float(np.asarray(x, dtype=np.float32))
    if dtype in FP8_VALUES:
        return fp8_from_float(x, dtype)
    if dtype.is_integer:
        lo = -dtype.max_finite - 1
        return np.clip(np.rint(np.asarray(x, dtype=np.float64)), lo, dtype.max_finite).astype(dtype.storage)
    return np.ascontiguousarray(x, dtype=dtype.storage)


def to_float64(x: np.ndarray, dtype: DType) -> np.ndarray:
    """A storage array -> its exact values in float64."""
    if dtype is DType.BF16:
        return bf16_to_float32(x).astype(np.float64)
    if dtype in FP8_VALUES:
        return FP8_VALUES[dtype][np.asarray(x, dtype=np.uint8)]
    return np.asarray(x, dtype=np.float64)
