"""Shared-memory tile layouts and swizzles: the one place that says where element (row, col) of a tile
lives in shared memory. The CUDA emitter takes its address arithmetic from here and the bank-conflict
simulator (``bank_sim``) scores the same addresses, so what is simulated is what is emitted.

A layout is ``rows x cols`` elements of ``elem_bytes`` each, stored row- or column-major, each stored
*line* (a row for row-major, a column for column-major) padded by ``pad_elems`` elements, then passed
through a swizzle. Offsets are bytes from the tile's base; the base must be aligned to the swizzle's
period (``TileLayout.base_alignment``) for the bank mapping, and TMA's own swizzling, to hold.

Swizzles, all frozen values with ``apply`` working on ints and NumPy integer arrays alike:

- ``NoSwizzle``.
- ``XorSwizzle(k)``: the seeds' Xor2/Xor4/Xor8. Within each line, the ``unit_bytes`` (16 B) chunk index
  is XORed with ``line % k``, so k consecutive lines put the same logical chunk in k different 16-byte
  bank groups. For a power-of-two pitch P it is CUTLASS ``Swizzle<log2 k, 4, log2 P - 4>``.
- ``Swizzle(bits, base, shift)``: CUTLASS/CuTe ``Swizzle<B,M,S>`` on byte offsets, exactly as
  ``include/cute/swizzle.hpp`` defines it: ``f(x) = x ^ shiftr(x & yyy_msk, S)`` with
  ``yyy_msk = ((1 << B) - 1) << (M + max(0, S))``; a negative S shifts left.
- ``TmaSwizzle("32B" | "64B" | "128B")``: the tensor-map swizzle modes, which are ``Swizzle<1,4,3>``,
  ``Swizzle<2,4,3>`` and ``Swizzle<3,4,3>`` on byte addresses. Source: CUTLASS
  ``include/cute/atom/copy_traits_sm90_tma_swizzle.hpp`` (``get_tma_swizzle_bits``: M == 4 with B = 1, 2,
  3 selects ``SmemSwizzleBits::B32``, ``B64``, ``B128``; ``get_tma_swizzle_base`` requires S == 3), which
  agrees with the PTX ISA's "tensor swizzling modes": the 16-byte chunk index within a 32/64/128-byte
  span (address bits 4..6) is XORed with address bits 7..9, repeating every 256/512/1024 bytes.

CUTLASS writes swizzles for 2-byte types in element units (``Swizzle<3,3,3>`` over half_t offsets);
``Swizzle.from_element_units`` converts one to the byte form used here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np

from tracea.doctor.errors import BadInputError

IntOrArray = TypeVar("IntOrArray", int, np.ndarray)


def _require_int(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise BadInputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class NoSwizzle:
    """The identity: addresses are the padded row/column-major offsets."""

    kind: Literal["none"] = field(default="none", init=False)

    def apply(self, offset: IntOrArray) -> IntOrArray:
        return offset

    def apply_line(self, line: IntOrArray, byte_in_line: IntOrArray, pitch_bytes: int) -> IntOrArray:
        return line * pitch_bytes + byte_in_line

    @property
    def period_bytes(self) -> int:
        return 1

    @property
    def keeps_bytes_together(self) -> int:
        """The largest power-of-two access (bytes) that the swizzle never splits."""
        return 1 << 30

    @property
    def name(self) -> str:
        return "none"

    def c_expr(self, line: str, byte_in_line: str, pitch_bytes: int) -> str:
        return f"(({line}) * {pitch_bytes}u + ({byte_in_line}))"

    def to_json(self) -> dict:
        return {"kind": "none"}


@dataclass(frozen=True)
class Swizzle:
    """CUTLASS/CuTe ``Swizzle<B,M,S>`` on byte offsets: ``x ^ shiftr(x & yyy_msk, S)``."""

    bits: int
    base: int
    shift: int
    kind: Literal["cutlass"] = field(default="cutlass", init=False)

    def __post_init__(self) -> None:
        _require_int("swizzle bits (B)", self.bits, 0)
        _require_int("swizzle base (M)", self.base, 0)
        if isinstance(self.shift, bool) or not isinstance(self.shift, (int, np.integer)):
            raise BadInputError(f"swizzle shift (S) must be an integer, got {self.shift!r}")
        # CuTe's static_assert: abs(SShift) >= BBits, so the YYY and ZZZ fields never overlap.
        if abs(self.shift) < self.bits:
            raise BadInputError(f"swizzle shift (S) must satisfy |S| >= B, got Swizzle<{self.bits},{self.base},{self.shift}>")
        if self.bits + self.base + abs(self.shift) > 30:
            raise BadInputError(f"swizzle Swizzle<{self.bits},{self.base},{self.shift}> reaches past 2^30 bytes")

    @classmethod
    def from_element_units(cls, bits: int, base: int, shift: int, elem_bytes: int) -> Swizzle:
        """CUTLASS's element-unit swizzle (e.g. ``Swizzle<3,3,3>`` over 2-byte offsets) in bytes."""
        if not _is_pow2(elem_bytes):
            raise BadInputError(f"elem_bytes must be a power of two, got {elem_bytes}")
        return cls(bits, base + elem_bytes.bit_length() - 1, shift)

    @property
    def yyy_mask(self) -> int:
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def zzz_mask(self) -> int:
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    def apply(self, offset: IntOrArray) -> IntOrArray:
        y = offset & self.yyy_mask
        return offset ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)

    def apply_line(self, line: IntOrArray, byte_in_line: IntOrArray, pitch_bytes: int) -> IntOrArray:
        return self.apply(line * pitch_bytes + byte_in_line)

    @property
    def period_bytes(self) -> int:
        """The swizzle repeats every ``period_bytes`` (one past its highest bit); bases align to it."""
        return 1 if self.bits == 0 else 1 << ((self.yyy_mask | self.zzz_mask).bit_length())

    @property
    def keeps_bytes_together(self) -> int:
        return 1 << 30 if self.bits == 0 else 1 << self.base

    @property
    def name(self) -> str:
        return f"Swizzle<{self.bits},{self.base},{self.shift}>"

    def c_expr(self, line: str, byte_in_line: str, pitch_bytes: int) -> str:
        """C for the swizzled byte offset: the emitter's copy of ``apply`` (CuTe's, written out)."""
        x = f"(({line}) * {pitch_bytes}u + ({byte_in_line}))"
        if self.bits == 0:
            return x
        op = ">>" if self.shift >= 0 else "<<"
        return f"({x} ^ (({x} & {self.yyy_mask:#x}u) {op} {abs(self.shift)}))"

    def to_json(self) -> dict:
        return {"kind": "cutlass", "bits": self.bits, "base": self.base, "shift": self.shift}


TMA_MODES: dict[str, int] = {"32B": 1, "64B": 2, "128B": 3}


@dataclass(frozen=True)
class TmaSwizzle:
    """A TMA tensor-map swizzle mode (``CU_TENSOR_MAP_SWIZZLE_32B/64B/128B``) as its CUTLASS equivalent."""

    mode: str
    kind: Literal["tma"] = field(default="tma", init=False)

    def __post_init__(self) -> None:
        if self.mode not in TMA_MODES:
            raise BadInputError(f"TMA swizzle mode must be one of {', '.join(TMA_MODES)}, got {self.mode!r}")

    @property
    def cutlass(self) -> Swizzle:
        return Swizzle(TMA_MODES[self.mode], 4, 3)

    @property
    def span_bytes(self) -> int:
        return 16 << TMA_MODES[self.mode]

    def apply(self, offset: IntOrArray) -> IntOrArray:
        return self.cutlass.apply(offset)

    def apply_line(self, line: IntOrArray, byte_in_line: IntOrArray, pitch_bytes: int) -> IntOrArray:
        return self.cutlass.apply(line * pitch_bytes + byte_in_line)

    @property
    def period_bytes(self) -> int:
        return self.cutlass.period_bytes

    @property
    def keeps_bytes_together(self) -> int:
        return 16

    @property
    def name(self) -> str:
        return f"TMA {self.mode} (= {self.cutlass.name})"

    def c_expr(self, line: str, byte_in_line: str, pitch_bytes: int) -> str:
        return self.cutlass.c_expr(line, byte_in_line, pitch_bytes)

    def to_json(self) -> dict:
        return {"kind": "tma", "mode": self.mode, "cutlass": self.cutlass.to_json()}


@dataclass(frozen=True)
class XorSwizzle:
    """The seeds' Xor-k: chunk index (``unit_bytes`` chunks) within a line XOR ``line % k``."""

    k: int
    unit_bytes: int = 16
    kind: Literal["xor"] = field(default="xor", init=False)

    def __post_init__(self) -> None:
        if self.k not in (2, 4, 8):
            raise BadInputError(f"Xor swizzle k must be 2, 4 or 8 (Xor2/Xor4/Xor8), got {self.k!r}")
        if self.unit_bytes not in (4, 8, 16):
            raise BadInputError(f"Xor swizzle unit_bytes must be 4, 8 or 16, got {self.unit_bytes!r}")

    def apply_line(self, line: IntOrArray, byte_in_line: IntOrArray, pitch_bytes: int) -> IntOrArray:
        unit = byte_in_line // self.unit_bytes
        within = byte_in_line % self.unit_bytes
        return line * pitch_bytes + ((unit ^ (line % self.k)) * self.unit_bytes) + within

    def equivalent_cutlass(self, pitch_bytes: int) -> Swizzle | None:
        """The CUTLASS swizzle this equals for a power-of-two pitch, else None."""
        if not _is_pow2(pitch_bytes) or pitch_bytes < self.k * self.unit_bytes:
            return None
        m = self.unit_bytes.bit_length() - 1
        b = self.k.bit_length() - 1
        return Swizzle(b, m, pitch_bytes.bit_length() - 1 - m)

    @property
    def period_bytes(self) -> int:
        return self.k * self.unit_bytes

    @property
    def keeps_bytes_together(self) -> int:
        return self.unit_bytes

    @property
    def name(self) -> str:
        return f"Xor{self.k}" + ("" if self.unit_bytes == 16 else f"/{self.unit_bytes}B")

    def c_expr(self, line: str, byte_in_line: str, pitch_bytes: int) -> str:
        u = self.unit_bytes
        return (f"(({line}) * {pitch_bytes}u + (((({byte_in_line}) / {u}u) ^ (({line}) % {self.k}u)) * {u}u)"
                f" + (({byte_in_line}) % {u}u))")

    def to_json(self) -> dict:
        return {"kind": "xor", "k": self.k, "unit_bytes": self.unit_bytes}


AnySwizzle = NoSwizzle | Swizzle | TmaSwizzle | XorSwizzle


def parse_swizzle(text: str) -> AnySwizzle:
    """``none``, ``xor2|xor4|xor8``, ``32B|64B|128B`` (TMA), or ``sw<B,M,S>`` / ``swizzle<B,M,S>`` (bytes)."""
    t = text.strip().lower().replace(" ", "")
    if t in ("", "none", "no"):
        return NoSwizzle()
    if t in ("xor2", "xor4", "xor8"):
        return XorSwizzle(int(t[3:]))
    if t.upper() in TMA_MODES or t in ("tma32b", "tma64b", "tma128b"):
        return TmaSwizzle(t.upper().removeprefix("TMA"))
    for prefix in ("swizzle<", "sw<"):
        if t.startswith(prefix) and t.endswith(">"):
            parts = t[len(prefix):-1].split(",")
            try:
                b, m, s = (int(p) for p in parts)
            except ValueError:
                break
            return Swizzle(b, m, s)
    raise BadInputError(f"unknown swizzle {text!r}",
                        "use none, xor2, xor4, xor8, 32B, 64B, 128B (TMA) or sw<B,M,S> on byte offsets")


@dataclass(frozen=True)
class TileLayout:
    """``rows x cols`` elements of ``elem_bytes`` in shared memory: order, padding, swizzle, base."""

    rows: int
    cols: int
    elem_bytes: int
    order: Literal["row", "col"] = "row"
    pad_elems: int = 0
    swizzle: AnySwizzle = field(default_factory=NoSwizzle)
    base_bytes: int = 0

    def __post_init__(self) -> None:
        _require_int("rows", self.rows, 1)
        _require_int("cols", self.cols, 1)
        _require_int("pad_elems", self.pad_elems, 0)
        _require_int("base_bytes", self.base_bytes, 0)
        if self.elem_bytes not in (1, 2, 4, 8):
            raise BadInputError(f"elem_bytes must be 1, 2, 4 or 8, got {self.elem_bytes!r}")
        if self.order not in ("row", "col"):
            raise BadInputError(f"order must be 'row' or 'col', got {self.order!r}")
        if not isinstance(self.swizzle, (NoSwizzle, Swizzle, TmaSwizzle, XorSwizzle)):
            raise BadInputError(f"swizzle must be a swizzle value, got {self.swizzle!r}")
        line_bytes = self.line_elems * self.elem_bytes
        sw = self.swizzle
        if isinstance(sw, XorSwizzle) and self.pitch_bytes % (sw.k * sw.unit_bytes):
            raise BadInputError(f"{sw.name} needs the line pitch ({self.pitch_bytes} B) to be a multiple of "
                                f"{sw.k * sw.unit_bytes} B, so the XOR stays inside each line")
        if isinstance(sw, XorSwizzle) and line_bytes != self.pitch_bytes:
            raise BadInputError(f"{sw.name} with padding would move data into the pad: use one or the other")
        if isinstance(sw, TmaSwizzle):
            # TMA writes dense boxes whose inner extent must fit the swizzle span (CUDA driver API,
            # cuTensorMapEncodeTiled: boxDim[0] * elementSize <= swizzle span).
            if self.pad_elems:
                raise BadInputError("TMA swizzle with pad_elems: TMA writes unpadded boxes")
            if line_bytes > sw.span_bytes or sw.span_bytes % line_bytes:
                raise BadInputError(f"TMA {sw.mode} needs the inner box extent ({line_bytes} B) to divide "
                                    f"{sw.span_bytes} B; split the tile into {sw.span_bytes}-byte-wide boxes")
        if self.base_bytes % self.base_alignment:
            raise BadInputError(f"base_bytes {self.base_bytes} must be a multiple of {self.base_alignment} "
                                f"(the period of {sw.name}) for the swizzle to map banks as on hardware")

    @property
    def lines(self) -> int:
        return self.rows if self.order == "row" else self.cols

    @property
    def line_elems(self) -> int:
        return self.cols if self.order == "row" else self.rows

    @property
    def pitch_bytes(self) -> int:
        return (self.line_elems + self.pad_elems) * self.elem_bytes

    @property
    def size_bytes(self) -> int:
        """Bytes the tile spans from its base (padding included)."""
        return self.lines * self.pitch_bytes

    @property
    def base_alignment(self) -> int:
        return max(16, self.swizzle.period_bytes)

    def offset(self, row: IntOrArray, col: IntOrArray) -> IntOrArray:
        """Byte offset of element (row, col) from the shared-memory base (tile base included)."""
        r = np.asarray(row)
        c = np.asarray(col)
        if r.size and (r.min() < 0 or r.max() >= self.rows or c.min() < 0 or c.max() >= self.cols):
            raise BadInputError(f"(row, col) outside the {self.rows}x{self.cols} tile")
        line, along = (row, col) if self.order == "row" else (col, row)
        return self.base_bytes + self.swizzle.apply_line(line, along * self.elem_bytes, self.pitch_bytes)

    def c_offset(self, row: str, col: str) -> str:
        """A C expression (unsigned arithmetic) for ``offset(row, col)``, for the CUDA emitter to paste in,
        so that the kernel computes exactly the addresses the bank simulator scored."""
        line, along = (row, col) if self.order == "row" else (col, row)
        expr = self.swizzle.c_expr(line, f"({along}) * {self.elem_bytes}u", self.pitch_bytes)
        return f"({self.base_bytes}u + {expr})" if self.base_bytes else expr

    def describe(self) -> str:
        pad = f" +{self.pad_elems} pad" if self.pad_elems else ""
        return (f"{self.rows}x{self.cols}x{self.elem_bytes}B {self.order}-major{pad}, swizzle {self.swizzle.name}"
                + (f", base {self.base_bytes}" if self.base_bytes else ""))

    def to_json(self) -> dict:
        return {"rows": self.rows, "cols": self.cols, "elem_bytes": self.elem_bytes, "order": self.order,
                "pad_elems": self.pad_elems, "swizzle": self.swizzle.to_json(), "base_bytes": self.base_bytes,
                "pitch_bytes": self.pitch_bytes, "size_bytes": self.size_bytes}
