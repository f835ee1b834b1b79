"""The tile scheduler: which output tile (or split-K work unit) each block (or cluster) computes, in what
order, and how many blocks the grid holds. A kernel (``gemm.py``, ``conv.py``) makes one ``TileScheduler``
for its schedule and hands it to the mainloop's producer and consumers (``mainloop.py``), which read their
walk from it and know no walk of their own.

Persistent and data-parallel: ``min(tiles, SMs)`` blocks (pairs, for a 2-block cluster) each walk
``tile = cluster_id, cluster_id + clusters, ...`` over cluster tiles (a pair of tile rows, or of tile columns
for ``cluster_axis`` "n"; ``rank`` picks the block's own), and ``tile_order`` maps that index to a (tile row,
tile column) ``group`` rows (raster "m") or columns ("n") at a time, so the blocks of one wave share a few A
(or B) panels in L2 (the geometry: ``tiles.py``). The producer and consumer warpgroups walk the same sequence.

Split-K (``splitk.py``) is the scheduler's other walk: the same blocks walk work units, a tile's k range
each, and the tile's last unit sums the others' partials (``fixup``) before the epilogue. Stream-K would be a
third: it changes the walk and the grid (``launch_geometry``), not the mainloop or the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..render import CudaRenderer
from . import splitk
from .schedule import WgmmaSchedule
from .splitk import Plan, k_steps
from .tiles import cluster_tile_counts, cluster_tiles, rank_fix, tile_coords, tile_order, tile_walk

__all__ = ["Plan", "TileScheduler", "cluster_tiles", "k_steps", "launch_geometry"]


@dataclass(frozen=True)
class TileScheduler:
    """The walk of one schedule's kernel, as the source text each part of the kernel places: the device
    functions (``functions``), the split-K parameters (``signature``), the kernel head's counts (``head``),
    the producer's loop (``producer_loop``, ``k_range``, ``rank_fix``), the consumers' (``consumer_loop``)
    and the split-K fix-up after a unit's mainloop (``fixup``)."""

    sched: WgmmaSchedule

    @property
    def split(self) -> bool:
        return self.sched.split != 1

    def functions(self) -> list[str]:
        """The device functions the walk calls: the tile order, and split-K's unit decoding."""
        return [tile_order(self.sched), *([splitk.UNIT_FN] if self.split else [])]

    def params(self) -> tuple[str, ...]:
        """The names of the kernel parameters the walk adds, in order (``signature``)."""
        return splitk.PARAMS if self.split else ()

    def signature(self) -> str:
        """The kernel parameters the walk adds (split-K's workspace, semaphores and slicing), with the
        comma before them; "" for the data-parallel walk."""
        return ", " + splitk.SIGNATURE if self.split else ""

    def head(self, k_iters: str) -> str:
        """Lines of the kernel head: the tile counts and this block's place in the walk, ``tiles`` and
        ``k_iters`` (a C expression), and split-K's ``units``."""
        units = "\n    const int units = dp_tiles + (tiles - dp_tiles) * splits;  /* split-K work units */" \
            if self.split else ""
        return f"""{tile_walk(self.sched)}
    const int tiles = {" * ".join(cluster_tile_counts(self.sched))}, k_iters = {k_iters};{units}"""

    def producer_loop(self, indent: str) -> str:
        """The producer's loop over its tiles (or split-K units) with the tile's coordinates."""
        if self.split:
            head = splitk.unit_loop_head(self.sched, indent)
        else:
            head = f"{indent}for (int tile = cluster_id; tile < tiles; tile += clusters) {{"
        rows, cols = cluster_tile_counts(self.sched)
        return head + f"""
{indent}    int tm, tn;
{indent}    tr_tile_coords(tile, {rows}, {cols}, tm, tn);"""

    def k_bounds(self) -> tuple[str, str]:
        """The first k step of the current tile (or unit) and the one past its last, as C expressions."""
        return ("kb", "ke") if self.split else ("0", "k_iters")

    def k_range(self) -> str:
        """The k steps of the current tile (or unit), as a C for-loop header."""
        first, end = self.k_bounds()
        return f"int kk = {first}; kk < {end}; ++kk"

    def rank_fix(self) -> str:
        return rank_fix(self.sched)

    def consumer_loop(self) -> str:
        """The head of a consumer's walk: its tile (or split-K unit), and where the ring stands then."""
        if self.split:
            return splitk.consumer_head(self.sched)
        S, sched = self.sched.stages, self.sched
        return f"""        for (int j = walk, tile = cluster_id + walk * clusters; tile < tiles;
             j += {sched.tile_walkers}, tile += {sched.tile_walkers} * clusters) {{
            int tm, tn;
{tile_coords(sched, "            ")}
            /* The producer fills the ring in the block's tile order: tile j starts at step j * k_iters. */
            const long long it0 = (long long)j * k_iters;
            int s = (int)(it0 % {S});
            uint32_t phase = (uint32_t)((it0 / {S}) & 1);"""

    def fixup(self, r: CudaRenderer) -> str:
        """After a unit's mainloop: split-K's reduction of a tile's slices (``splitk.fixup``); "" otherwise."""
        return splitk.fixup(self.sched, r) if self.split else ""

    def plan(self, m: int, n: int, k_iters: int, sm_count: int) -> Plan:
        """The split-K slicing of an ``m`` x ``n`` output of ``k_iters`` k steps on ``sm_count`` SMs."""
        return splitk.plan(self.sched, m, n, k_iters, sm_count)


def launch_geometry(sched: WgmmaSchedule, m: int, n: int, sm_count: int,
                    max_clusters: int | None = None, plan: Any = None) -> tuple[int, int, int]:
    """(grid blocks, threads per block, dynamic shared memory bytes) for an ``m`` x ``n`` output.
    Persistent: one block (or pair) per SM (pair of SMs) that can hold one at once (``max_clusters``,
    from the driver when known); otherwise one block per tile. Under split-K (``plan``, a
    ``splitk.Plan``) the walk is over its work units instead of tiles."""
    cl = sched.cluster
    tiles = cluster_tiles(sched, m, n)
    if plan is not None:
        tiles = plan.units
    slots = max_clusters if max_clusters else sm_count // cl
    grid = cl * (min(tiles, slots) if sched.persistent else tiles)
    return grid, sched.threads, sched.smem_bytes
