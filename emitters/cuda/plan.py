"""Shared-memory plans of the CUDA kernels: where each operand tile lives, with which swizzle.

The operand tiles of the mma core are ``TileLayout`` values from ``emitters/layout.py``: the kernel's
address arithmetic is their ``c_offset`` pasted into the source, and ``smem.py`` hands the very same
layouts to the bank-conflict simulator.

An operand tile is stored "k-major" (one line per row of the m or n extent, ``bk`` elements along it;
read by plain ``ldmatrix``) when its global layout has k contiguous, else "mn-major" (one line per k,
the block's m or n extent along it; read by ``ldmatrix.trans``), so global rows copy to shared lines
with 16-byte ``cp.async`` either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..layout import AnySwizzle, NoSwizzle, Swizzle, TileLayout, parse_swizzle


def conflict_free_swizzle(line_bytes: int) -> AnySwizzle:
    """The CUTLASS swizzle that makes 16-byte accesses to 8 consecutive lines (an ldmatrix phase, a
    quarter-warp of cp.async) hit 8 different 16-byte bank groups: XOR the chunk index (address bits
    4..) with the index of the 128-byte bank row (bits 7..), or with the line for lines over 128 B."""
    if line_bytes < 32 or line_bytes & (line_bytes - 1):
        return NoSwizzle()
    bits = min(3, (line_bytes // 16).bit_length() - 1)
    shift = max(3, line_bytes.bit_length() - 1 - 4)
    return Swizzle(bits, 4, shift)


def operand_kmajor(op: Any, which: str) -> bool:
    """Whether operand ``which`` ("a" or "b") of ``op`` has k contiguous in global memory."""
    if op.kind == "conv2d":
        return True  # A: the k = (c, r, s) gather is stored k-major; B: filters are K x (C R S)
    if which == "a":
        return op.layout_a == "row"
    return op.layout_b == "col"


@dataclass(frozen=True)
class MmaPlan:
    a: TileLayout
    b: TileLayout
    a_kmajor: bool
    b_kmajor: bool
    stages: int
    table_bytes: int  # the conv coordinate table (0: none)

    @property
    def stage_bytes(self) -> int:
        return self.a.size_bytes + self.b.size_bytes

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes + self.table_bytes


def _tile(lines: int, line_elems: int, swizzle: str) -> TileLayout:
    sw = conflict_free_swizzle(line_elems * 2) if swizzle == "auto" else parse_swizzle(swizzle)
    return TileLayout(lines, line_elems, 2, "row", swizzle=sw)


def conv_table_bytes(op: Any) -> int:
    return 8 * (-(-op.gemm_k // 64) * 64)


def hoists(op: Any, schedule: Any, arch_smem: int | None = None) -> bool:
    """Whether the conv kernel keeps its per-k coordinate table in shared memory (hybrid hoisting)."""
    if op.kind != "conv2d" or schedule.hoist == "recompute":
        return False
    if schedule.hoist == "smem":
        return True
    budget = arch_smem if arch_smem is not None else 99 * 1024
    return mma_plan(op, schedule, table=False).smem_bytes + conv_table_bytes(op) <= budget


def mma_plan(op: Any, schedule: Any, table: bool | None = None, arch_smem: int | None = None) -> MmaPlan:
    ak, bk_ = operand_kmajor(op, "a"), operand_kmajor(op, "b")
    s = schedule
    a = _tile(s.bm, s.bk, s.swizzle) if ak else _tile(s.bk, s.bm, s.swizzle)
    b = _tile(s.bn, s.bk, s.swizzle) if bk_ else _tile(s.bk, s.bn, s.swizzle)
    use_table = hoists(op, s, arch_smem) if table is None else table
    return MmaPlan(a, b, ak, bk_, s.stages, conv_table_bytes(op) if use_table and op.kind == "conv2d" else 0)


SIMT_PAD = 4  # floats of padding per shared line of the SIMT tiles (keeps the transposed stores apart)


def simt_smem_bytes(schedule: Any) -> int:
    return 2 * schedule.bk * (schedule.bm + schedule.bn + 2 * SIMT_PAD) * 4


def simt_hoists(op: Any, schedule: Any, arch_smem: int) -> bool:
    if op.kind != "conv2d" or schedule.hoist == "recompute":
        return False
    return schedule.hoist == "smem" or simt_smem_bytes(schedule) + conv_table_bytes(op) <= arch_smem


def smem_bytes(op: Any, schedule: Any, arch_smem: int | None = None) -> int:
    """Dynamic shared memory one block of ``schedule`` needs for ``op`` on a target with ``arch_smem``."""
    if schedule.core == "mma":
        return mma_plan(op, schedule, arch_smem=arch_smem).smem_bytes
    if schedule.core == "simt":
        hoist = simt_hoists(op, schedule, arch_smem if arch_smem is not None else 48 * 1024)
        return simt_smem_bytes(schedule) + (conv_table_bytes(op) if hoist else 0)
    return 0
