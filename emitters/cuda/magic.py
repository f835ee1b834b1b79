"""Magic-number division: n / d as a multiply-high, an add and a shift, for the index arithmetic of
the implicit-GEMM convolution (pixel -> image, row, column; filter tap -> r, s, c) whose divisors are
only known at run time. The host computes (mul, shr) once per shape; the kernel's ``tr_div`` is
``(umulhi(n, mul) + n) >> shr``, exact for every 0 <= n < 2^31 and 1 <= d < 2^31 (the "round-up"
method of Granlund and Montgomery, with the 33-bit sum kept in 32 bits by the bound on n).
"""

from __future__ import annotations

from tracea.doctor.errors import BadInputError


def magic(d: int) -> tuple[int, int]:
    """(mul, shr) with floor(n / d) == (umulhi(n, mul) + n) >> shr for all 0 <= n < 2^31."""
    if not 1 <= d < 2**31:
        raise BadInputError(f"divisor {d} outside 1..2^31-1")
    shr = (d - 1).bit_length()  # ceil(log2 d)
    mul = ((1 << 32) * ((1 << shr) - d)) // d + 1
    return mul & 0xFFFFFFFF, shr


def divide(n: int, mul: int, shr: int) -> int:
    """The kernel's ``tr_div`` in Python (tests check it against //)."""
    return (((n * mul) >> 32) + n) >> shr


def as_int32(u: int) -> int:
    """A uint32 as the int32 with the same bits (TrArgs holds ints)."""
    u &= 0xFFFFFFFF
    return u - (1 << 32) if u >= 1 << 31 else u
