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
    c_stage: CStage | None = None  # the epilogue's staging tile (None: C written from the fragments)

    @property
    def stage_bytes(self) -> int:
        return self.a.size_bytes + self.b.size_bytes

    @property
    def smem_bytes(self) -> int:
        pipeline = self.stages * self.stage_bytes + self.table_bytes
        return max(pipeline, self.c_stage.size_bytes) if self.c_stage else pipeline


C_PAD = 8  # floats of padding per staging line: the 8-byte fragment stores of 8 rows land on distinct banks


@dataclass(frozen=True)
class CStage:
    """The fp32 tile through which the mma epilogue passes C, reusing the pipeline's shared memory.

    Pass ``p`` holds, of every warp row ``wm``, its fragment rows ``p*rows_per_warp .. +rows_per_warp``
    (all ``bn`` columns): ``warps_m * rows_per_warp`` lines of ``bn + C_PAD`` floats. Warps write their
    accumulators as 8-byte float pairs; the block reads 2 x 16 bytes per thread (8 columns = one 16-byte
    bf16/fp16 store to C). Column ``col`` lives at ``col ^ ((col >> 3) & 4)``: the 16-byte chunk index's bit 0
    flipped by its bit 3, so the 8 threads of a quarter-warp reading chunks 0, 2, .., 14 hit 8 different
    bank groups; the padding keeps the fragment stores apart. Both checked by the bank simulator
    (``smem.epilogue_accesses``)."""

    warps_m: int
    rows_per_warp: int  # fragment rows of one warp in one pass (a multiple of 16)
    passes: int
    bn: int
    pad: int = C_PAD
    swizzle: bool = True  # (pad 0 / no swizzle: the layouts the simulator shows conflicting, for the tests)

    @property
    def lines(self) -> int:
        return self.warps_m * self.rows_per_warp

    @property
    def stride(self) -> int:
        return self.bn + self.pad

    @property
    def size_bytes(self) -> int:
        return self.lines * self.stride * 4

    def offset(self, line: Any, col: Any) -> Any:
        """Float offset of (line, col); NumPy arrays or ints."""
        return line * self.stride + ((col ^ ((col >> 3) & 4)) if self.swizzle else col)

    def c_offset(self, line: str, col: str) -> str:
        if not self.swizzle:
            return f"({line}) * {self.stride} + ({col})"
        return f"({line}) * {self.stride} + (({col}) ^ ((({col}) >> 3) & 4))"


def stages_c(op: Any, schedule: Any) -> bool:
    """Whether the epilogue stages C through shared memory: asked for, C row-major (GEMM, NHWC conv), and no
    persistent grid (whose cp.async ring runs on into the next tile while the epilogue stores)."""
    s = schedule
    if getattr(s, "epilogue", "direct") != "smem" or s.persist > 0:
        return False
    return op.kind == "gemm" or (op.kind == "conv2d" and op.layout == "nhwc")


def c_stage(op: Any, schedule: Any, pipeline_bytes: int) -> CStage | None:
    """The staging tile: as many fragment rows per pass as fit in the pipeline's bytes (one 16-row
    slice per warp at least, which may then need more shared memory than the pipeline)."""
    s = schedule
    if not stages_c(op, s):
        return None
    warps_m, mt = s.bm // s.wm, s.wm // 16
    fits = [d for d in range(1, mt + 1) if mt % d == 0
            and warps_m * d * 16 * (s.bn + C_PAD) * 4 <= pipeline_bytes]
    per = max(fits) if fits else 1
    return CStage(warps_m, per * 16, mt // per, s.bn)


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
    table_bytes = conv_table_bytes(op) if use_table and op.kind == "conv2d" else 0
    return MmaPlan(a, b, ak, bk_, s.stages, table_bytes,
                   c_stage(op, s, s.stages * (a.size_bytes + b.size_bytes)))


SIMT_PAD = 4  # floats of padding per shared line of the SIMT tiles (keeps the transposed stores apart)


def simt_smem_bytes(schedule: Any) -> int:
    if getattr(schedule, "form", "tile") == "gemv":  # 8 warps' partial sums of 8 rows x 128 columns at a time
        return 4 * 8 * min(8, schedule.bm) * schedule.bn
    return schedule.stages * schedule.bk * (schedule.bm + schedule.bn + 2 * SIMT_PAD) * 4


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


@dataclass(frozen=True)
class MmaKernel:
    """What each step of the mma.sync kernel (loader, main loop, epilogue) reads: the op's (implicit) GEMM
    extents and fused ops, the schedule, which operand copies vectorise, and the shared-memory plan."""

    op: Any
    s: Any  # the CudaSchedule
    smem: MmaPlan
    name: str
    epi: tuple[str, ...]
    a_vec: bool  # 16-byte cp.async of A's global rows (rows start on 16 bytes)
    b_vec: bool

    @property
    def conv(self) -> bool:
        return self.op.kind == "conv2d"

    @property
    def dtype(self) -> str:
        return self.op.dtype.value

    @property
    def mnk(self) -> tuple[int, int, int]:
        op = self.op
        return (op.gemm_m, op.gemm_n, op.gemm_k) if self.conv else (op.m, op.n, op.k)

    @property
    def persistent(self) -> bool:
        """A persistent grid (GEMM): each block walks tiles blockIdx.x, + gridDim.x, ...; the cp.async ring
        runs on into the next tile's k tiles, so its first loads are in flight during the last epilogue."""
        return self.s.persist > 0 and not self.conv

    @property
    def origin(self) -> tuple[str, str]:
        """The C names of the loader's tile origin (its own where it runs ahead of the compute)."""
        return ("lm0", "ln0") if self.persistent else ("m0", "n0")

    @property
    def hoist(self) -> bool:
        return self.smem.table_bytes > 0

    @property
    def threads(self) -> int:
        return self.s.block_threads

    def copies(self, which: str) -> tuple[int, int, int]:
        """(lines, 16-byte chunks per line, chunks per thread) of operand tile ``which``."""
        t = self.smem.a if which == "a" else self.smem.b
        lines, cpl = t.rows, t.cols // 8
        return lines, cpl, -(-(lines * cpl) // self.threads)


def mma_kernel(op: Any, schedule: Any, arch_smem: int | None = None) -> MmaKernel:
    s = schedule
    conv = op.kind == "conv2d"
    plan = mma_plan(op, s, arch_smem=arch_smem)
    dtype = op.dtype.value
    epi = ("bias",) if conv and op.bias else (() if conv else op.epilogue)
    if conv:
        a_vec, b_vec = op.layout == "nhwc" and op.c % 8 == 0, op.gemm_k % 8 == 0
    else:
        a_vec = (op.k if plan.a_kmajor else op.m) % 8 == 0
        b_vec = (op.k if plan.b_kmajor else op.n) % 8 == 0
    name = (f"tr_{op.kind}_mma_{dtype}_{'a' + ('k' if plan.a_kmajor else 'm')}{'b' + ('k' if plan.b_kmajor else 'n')}"
            f"_{s.name}" + (f"_{op.layout}" if conv else "") + ("_" + "_".join(epi) if epi else ""))
    name = name.replace("<", "").replace(">", "").replace(",", "")
    return MmaKernel(op, s, plan, name, epi, a_vec, b_vec)


@dataclass(frozen=True)
class SimtKernel:
    """What each step of the SIMT kernel (loader, main loop, epilogue) reads: the op's (implicit) GEMM, the
    schedule, the fused ops, whether the conv keeps its k table in shared memory, the block's bytes."""

    op: Any
    s: Any  # the CudaSchedule
    name: str
    epi: tuple[str, ...]
    hoist: bool
    smem: int  # dynamic shared memory per block

    @property
    def conv(self) -> bool:
        return self.op.kind == "conv2d"

    @property
    def mnk(self) -> tuple[int, int, int]:
        op = self.op
        return (op.gemm_m, op.gemm_n, op.gemm_k) if self.conv else (op.m, op.n, op.k)

    @property
    def threads(self) -> int:
        return self.s.block_threads


def simt_kernel(op: Any, schedule: Any, arch_smem: int) -> SimtKernel:
    s = schedule
    conv = op.kind == "conv2d"
    epi = ("bias",) if conv and op.bias else (() if conv else op.epilogue)
    hoist = simt_hoists(op, s, arch_smem)
    name = f"tr_{op.kind}_simt_fp32_{s.name}" + (f"_{op.layout}" if conv else
                                                 f"_{op.layout_a[0]}{op.layout_b[0]}") + \
        ("_" + "_".join(epi) if epi else "")
    return SimtKernel(op, s, name, epi, hoist, simt_smem_bytes(s) + (conv_table_bytes(op) if hoist else 0))
