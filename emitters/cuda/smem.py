"""The shared-memory instructions of an mma-core kernel's main loop, for the bank-conflict simulator.

``mainloop_accesses(op, schedule)`` lists, for one block and one k tile, every warp's

- 16-byte stores into the operand tiles (``cp.async`` where the rows are 16-byte aligned, else the
  ``st.shared.v4`` of the register path), one instruction per loader iteration, as ``mma.py`` issues
  them (thread ``tid`` copies chunks ``tid + i * threads``);
- ``ldmatrix.x4`` loads of the A and B fragments for each k16 step (``.trans`` moves the same bytes).

``epilogue_accesses(op, schedule)`` lists those of the staged epilogue (the fp32 C tile of ``plan.CStage``).

Addresses come from the same ``TileLayout`` values (``plan.py``) whose ``c_offset`` the kernel's source
pastes in, so a swizzle that simulates conflict-free here is the swizzle the kernel runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..bank_access import INACTIVE, WARP, AccessBatch
from .plan import mma_plan


def _stores(layout: Any, base: int, threads: int, op: str, name: str) -> AccessBatch:
    cpl = layout.cols // 8
    total = layout.rows * cpl
    iters = -(-total // threads)
    rows = []
    for w in range(threads // WARP):
        for i in range(iters):
            c = w * WARP + np.arange(WARP) + i * threads
            valid = c < total
            c = np.where(valid, c, 0)
            addr = base + np.asarray(layout.offset(c // cpl, (c % cpl) * 8), dtype=np.int64)
            rows.append(np.where(valid, addr, INACTIVE))
    return AccessBatch.uniform(op, 16, np.array(rows), names=[name] * len(rows))


def _ldmatrix(plan: Any, s: Any, base_a: int, base_b: int) -> AccessBatch:
    lane = np.arange(WARP)
    lj, lr = lane >> 3, lane & 7
    warps_n = s.bn // s.wn
    rows, names = [], []
    for w in range(s.warps):
        wm0, wn0 = (w // warps_n) * s.wm, (w % warps_n) * s.wn
        for kk in range(s.bk // 16):
            for i in range(s.wm // 16):
                if plan.a_kmajor:
                    line, col = wm0 + i * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8
                else:
                    line, col = kk * 16 + (lj >> 1) * 8 + lr, wm0 + i * 16 + (lj & 1) * 8
                rows.append(base_a + np.asarray(plan.a.offset(line, col), dtype=np.int64))
                names.append("ldmatrix A" + ("" if plan.a_kmajor else ".trans"))
            for p in range(s.wn // 16):
                if plan.b_kmajor:
                    line, col = wn0 + p * 16 + (lj >> 1) * 8 + lr, kk * 16 + (lj & 1) * 8
                else:
                    line, col = kk * 16 + (lj & 1) * 8 + lr, wn0 + p * 16 + (lj >> 1) * 8
                rows.append(base_b + np.asarray(plan.b.offset(line, col), dtype=np.int64))
                names.append("ldmatrix B" + ("" if plan.b_kmajor else ".trans"))
    return AccessBatch.uniform("ldmatrix.x4", 16, np.array(rows), names=names)


def vector_copies(op: Any) -> tuple[bool, bool]:
    """Whether the A and B tiles are filled by cp.async (True) or by register stores (False)."""
    if op.kind == "conv2d":
        return op.layout == "nhwc" and op.c % 8 == 0, op.gemm_k % 8 == 0
    a = (op.k if op.layout_a == "row" else op.m) % 8 == 0
    b = (op.k if op.layout_b == "col" else op.n) % 8 == 0
    return a, b


def mainloop_accesses(op: Any, schedule: Any) -> AccessBatch:
    """One block's shared-memory instructions for one k tile of the main loop (stage slot 0)."""
    if schedule.core != "mma":
        raise ValueError("mainloop_accesses describes the mma core")
    plan = mma_plan(op, schedule)
    threads = schedule.block_threads
    base_a, base_b = 0, schedule.stages * plan.a.size_bytes
    a_vec, b_vec = vector_copies(op)
    return AccessBatch.concat([
        _stores(plan.a, base_a, threads, "cp.async" if a_vec else "st", "A tile store"),
        _stores(plan.b, base_b, threads, "cp.async" if b_vec else "st", "B tile store"),
        _ldmatrix(plan, schedule, base_a, base_b),
    ])


def epilogue_accesses(op: Any, schedule: Any, stage: Any = None) -> AccessBatch:
    """One block's shared-memory instructions of the staged epilogue (``mma_epilogue.staged_epilogue``), all passes:
    the 8-byte float-pair stores of every warp's accumulator fragments, then the two 16-byte loads per
    thread and row chunk of 8 columns (``stage``: another ``CStage`` to score in its place). Raises
    ``ValueError`` when the schedule does not stage C."""
    cs = stage if stage is not None else mma_plan(op, schedule).c_stage
    if cs is None:
        raise ValueError(f"{schedule.name} does not stage C through shared memory")
    s = schedule
    lane = np.arange(WARP)
    warps_n = s.bn // s.wn
    stores, loads = [], []
    nt = s.block_threads
    cpr = s.bn // 8
    total = cs.lines * cpr
    for _ in range(cs.passes):  # every pass uses the same addresses
        for w in range(s.warps):
            warp_m, warp_n = w // warps_n, w % warps_n
            for ii in range(cs.rows_per_warp // 16):
                for half in range(2):
                    line = warp_m * cs.rows_per_warp + ii * 16 + (lane >> 2) + half * 8
                    for j in range(s.wn // 8):
                        col = warp_n * s.wn + j * 8 + (lane & 3) * 2
                        stores.append(4 * cs.offset(line, col))
        for it in range(-(-total // nt)):
            for w in range(nt // WARP):
                c = w * WARP + lane + it * nt
                valid = c < total
                line, ch = np.where(valid, c // cpr, 0), np.where(valid, c % cpr, 0)
                for h in range(2):
                    loads.append(np.where(valid, 4 * cs.offset(line, ch * 8 + h * 4), INACTIVE))
    return AccessBatch.concat([
        AccessBatch.uniform("st", 8, np.array(stores), names=["C stage store"] * len(stores)),
        AccessBatch.uniform("ld", 16, np.array(loads), names=["C stage load"] * len(loads)),
    ])


def bank_conflict_drop(op: Any, variant: Any, schedule: Any) -> str | None:
    """The tuner's pruning rule for one candidate (tuner/space.py): the reason to drop a schedule whose
    named swizzle makes its main loop conflict when the emitter's own choice (``auto``) for the same tile
    is conflict-free; None to keep it. Schedules on ``auto`` and cores other than mma are kept."""
    import dataclasses

    from ..bank_sim import simulate

    if getattr(schedule, "core", None) != "mma" or schedule.swizzle == "auto":
        return None
    mine = simulate(mainloop_accesses(op, schedule)).totals()["conflicts"]
    if mine == 0:
        return None
    auto = simulate(mainloop_accesses(op, dataclasses.replace(schedule, swizzle="auto"))).totals()["conflicts"]
    if auto:
        return None
    return f"swizzle {schedule.swizzle}: {mine} conflict wavefronts per k tile; auto has none"
