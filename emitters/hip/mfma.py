"""Where each element of an MFMA's matrices lives in a 64-lane wavefront's registers (issue 19), for the AMD
CDNA2 (gfx90a) and CDNA3 (gfx942) instructions the HIP kernels use, and a NumPy emulation of one
instruction built on those placements alone.

The placements are AMD's, as its Matrix Instruction Calculator prints them (tests/fixtures/mfma/ holds
its tables for every instruction below, and tests/emitters/hip/test_hip_mfma.py checks this model against each entry):

- A (m x k): lane ``i + m * (kk // e)`` holds row ``i``, element ``kk % e`` of its ``e = k * m / 64`` inputs
  (four 16-bit values packed two to a 32-bit register, or one fp32 value);
- B (k x n): lane ``j + n * (kk // e)`` holds column ``j``, element ``kk % e``;
- C and D (m x n, fp32): lane ``j + n * ((i // 4) % g)`` holds column ``j``, in register
  ``4 * (i // (4 g)) + i % 4``, where ``g = 64 / n`` lane groups share the rows in steps of four.

A kernel's fragment index math (which lane loads which element of a tile, which register holds which
output) is written once, in these terms; the HIP-on-CUDA prelude's software MFMA computes with the same
placements, so a kernel that runs right there has its lanes and registers where the hardware wants them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WAVE = 64


@dataclass(frozen=True)
class Mfma:
    """One MFMA shape: ``m x n x k`` (one block), its input type, and its mnemonic per target."""

    m: int
    n: int
    k: int
    dtype: str  # "bf16", "fp16" or "fp32" inputs; fp32 accumulation
    mnemonics: tuple[tuple[str, str], ...]  # (gfx target, mnemonic)

    @property
    def per_lane(self) -> int:
        """Input elements of A (and of B) each lane holds."""
        return self.k * self.m // WAVE

    @property
    def groups(self) -> int:
        """Lane groups that split k for A and B, and the rows of C and D."""
        return WAVE // self.n

    @property
    def input_registers(self) -> int:
        """32-bit registers an A (or B) operand takes in each lane."""
        return self.per_lane if self.dtype == "fp32" else self.per_lane // 2

    @property
    def acc_registers(self) -> int:
        return self.m * self.n // WAVE

    def mnemonic(self, target: str) -> str | None:
        return dict(self.mnemonics).get(target)

    def a_slot(self, i: int, kk: int) -> tuple[int, int]:
        """(lane, element) of A[i][kk]."""
        return i + self.m * (kk // self.per_lane), kk % self.per_lane

    def b_slot(self, kk: int, j: int) -> tuple[int, int]:
        """(lane, element) of B[kk][j]."""
        return j + self.n * (kk // self.per_lane), kk % self.per_lane

    def d_slot(self, i: int, j: int) -> tuple[int, int]:
        """(lane, register) of C[i][j] and D[i][j]."""
        return j + self.n * ((i // 4) % self.groups), 4 * (i // (4 * self.groups)) + i % 4

    # ------------------------------------------- the same placements as index expressions for a kernel body
    # Python-evaluable (``//``, ``%`` on non-negative ints) and C-renderable (``c_expr``): the HIP kernels'
    # fragment loads and stores are written with these, and tests evaluate them against the slots above.

    def a_row(self, lane: str) -> str:
        """The A row (and, for B, the column) that ``lane`` holds."""
        return f"({lane} % {self.m})"

    def a_k(self, lane: str, element: str) -> str:
        """The k of ``element`` in ``lane`` (A and B alike)."""
        return f"({self.per_lane} * ({lane} // {self.m}) + {element})"

    def d_row(self, lane: str, register: str) -> str:
        """The C/D row that accumulator ``register`` of ``lane`` holds (its column is ``a_row(lane)``)."""
        g = self.groups
        return f"({4 * g} * ({register} // 4) + 4 * (({lane} // {self.n}) % {g}) + {register} % 4)"

    def register_of(self, element: int) -> tuple[int, int | None]:
        """(register, 16-bit half or None) of an A or B element within its lane."""
        return (element, None) if self.dtype == "fp32" else (element // 2, element % 2)

    # -------------------------------------------------------------- the wavefront's registers as arrays

    def _scatter(self, matrix: Any, slot: Any, width: int, dtype: Any) -> Any:
        """``matrix`` as lanes x ``width`` registers, each element where ``slot(row, col)`` puts it."""
        import numpy as np

        out = np.zeros((WAVE, width), dtype=dtype)
        for (row, col), value in np.ndenumerate(matrix):
            out[slot(row, col)] = value
        return out

    def _gather(self, regs: Any, shape: tuple[int, int], slot: Any) -> Any:
        import numpy as np

        out = np.zeros(shape, dtype=np.float64)
        for row in range(shape[0]):
            for col in range(shape[1]):
                out[row, col] = regs[slot(row, col)]
        return out

    def pack_a(self, a: Any) -> Any:
        """A (m x k) as lanes x elements, as the instruction reads it."""
        return self._scatter(a, self.a_slot, self.per_lane, a.dtype)

    def pack_b(self, b: Any) -> Any:
        return self._scatter(b, self.b_slot, self.per_lane, b.dtype)

    def pack_d(self, d: Any) -> Any:
        """C or D (m x n) as lanes x accumulator registers."""
        import numpy as np

        return self._scatter(d, self.d_slot, self.acc_registers, np.float32)

    def unpack_d(self, regs: Any) -> Any:
        import numpy as np

        return self._gather(regs, (self.m, self.n), self.d_slot).astype(np.float32)

    def emulate(self, a_regs: Any, b_regs: Any, c_regs: Any) -> Any:
        """The instruction on registers: D = A B + C, each product exact, summed in fp32 (what a software
        MFMA in the compatibility prelude computes), every operand found through the placements above."""
        import numpy as np

        a = self._gather(a_regs, (self.m, self.k), self.a_slot)
        b = self._gather(b_regs, (self.k, self.n), self.b_slot)
        acc = self.unpack_d(c_regs)
        for kk in range(self.k):  # one rank-1 update per k, rounded to fp32 as an accumulator is
            acc = (acc + np.outer(a[:, kk], b[kk, :])).astype(np.float32)
        return self.pack_d(acc)


def c_expr(expr: str) -> str:
    """A placement expression in C (its operands are non-negative, so ``//`` is C's ``/``)."""
    return expr.replace("//", "/")


def _mfma(m: int, n: int, k: int, dtype: str, cdna2: str, cdna3: str) -> Mfma:
    return Mfma(m, n, k, dtype, (("gfx90a", cdna2), ("gfx942", cdna3)))


# The instructions the HIP kernels use: CDNA2 spells bf16's with the _1k suffix (4 bf16 per lane; gfx908's
# bf16 MFMAs take 2 and are not used), CDNA3 with an underscore before the type.
INSTRUCTIONS: dict[str, Mfma] = {
    "32x32x8_bf16": _mfma(32, 32, 8, "bf16", "v_mfma_f32_32x32x8bf16_1k", "v_mfma_f32_32x32x8_bf16"),
    "16x16x16_bf16": _mfma(16, 16, 16, "bf16", "v_mfma_f32_16x16x16bf16_1k", "v_mfma_f32_16x16x16_bf16"),
    "32x32x8_fp16": _mfma(32, 32, 8, "fp16", "v_mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8_f16"),
    "16x16x16_fp16": _mfma(16, 16, 16, "fp16", "v_mfma_f32_16x16x16f16", "v_mfma_f32_16x16x16_f16"),
    "32x32x2_fp32": _mfma(32, 32, 2, "fp32", "v_mfma_f32_32x32x2f32", "v_mfma_f32_32x32x2_f32"),
    "16x16x4_fp32": _mfma(16, 16, 4, "fp32", "v_mfma_f32_16x16x4f32", "v_mfma_f32_16x16x4_f32"),
}
