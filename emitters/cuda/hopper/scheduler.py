"""The tile scheduler: which output tile each block (or cluster) computes, in what order, and how many
blocks the grid holds.

Persistent and data-parallel today: ``min(tiles, SMs)`` blocks (pairs, for a 2-block cluster) each
walk ``tile = cluster_id, cluster_id + clusters, ...`` over cluster tiles (a pair of tile rows, or of
tile columns for ``cluster_axis`` "n"; ``rank`` picks the block's own), and ``tile_order`` maps that index to a (tile
row, tile column) ``group`` rows (raster "m") or columns ("n") at a time, so the blocks of one wave
share a few A (or B) panels in L2. The producer and consumer warpgroups walk the same sequence.

Stream-K goes here: splitting the k loop of the last, partial wave's tiles across blocks (a tile's
k range per work unit, a fix-up reduction of partial accumulators) changes the walk the kernels read
(``tile_walk``, ``tile_order``) and the grid (``launch_geometry``), not the mainloop or the epilogue.
"""

from __future__ import annotations

from typing import Any

from .schedule import WgmmaSchedule


def tile_order(sched: WgmmaSchedule) -> str:
    """``tr_tile_coords``: persistent tile index -> (tile row, tile column), ``group`` tile rows (raster
    "m") or columns ("n") at a time."""
    major, minor = ("tm", "tn") if sched.raster == "m" else ("tn", "tm")
    count_major, count_minor = ("tiles_m", "tiles_n") if sched.raster == "m" else ("tiles_n", "tiles_m")
    return f"""static __device__ __forceinline__ void tr_tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {{
    const int per_group = {sched.group} * {count_minor};
    const int g = t / per_group, first = g * {sched.group};
    const int size = min({count_major} - first, {sched.group});
    const int rest = t - g * per_group;
    {major} = first + rest % size;
    {minor} = rest / size;
}}
"""


def tile_walk(sched: WgmmaSchedule) -> str:
    """The kernel's tile counts and this block's place in the walk (``rank`` in its cluster,
    ``cluster_id`` of ``clusters``), from the runtime ``M`` and ``N``: lines of the kernel head. The walk
    is over cluster tiles: ``tiles_mc`` x ``tiles_n`` (pairs of tile rows) or, along N, ``tiles_m`` x
    ``tiles_nc`` (pairs of tile columns; with an odd count the last pair's second block is past N: it
    loads its half of A for its peer, computes on TMA's zero fill and stores nothing)."""
    if sched.cluster_axis == "n":
        cl = sched.cluster
        return f"""    const int tiles_m = (M + {sched.bm - 1}) / {sched.bm}, tiles_n = (N + {sched.bn - 1}) / {sched.bn};
    /* A cluster of {cl} blocks walks tiles of {cl} tile columns (one per block, "rank") sharing one A panel. */
    const int rank = blockIdx.x % {cl}, cluster_id = blockIdx.x / {cl};
    const int clusters = gridDim.x / {cl}, tiles_nc = (tiles_n + {cl - 1}) / {cl};"""
    return f"""    const int tiles_m = (M + {sched.bm - 1}) / {sched.bm}, tiles_n = (N + {sched.bn - 1}) / {sched.bn};
    /* A cluster of CL blocks walks tiles of CL tile rows (one per block, "rank") sharing one B panel. */
    const int rank = blockIdx.x % {sched.cluster}, cluster_id = blockIdx.x / {sched.cluster};
    const int clusters = gridDim.x / {sched.cluster}, tiles_mc = (tiles_m + {sched.cluster - 1}) / {sched.cluster};"""


def cluster_tile_counts(sched: WgmmaSchedule) -> tuple[str, str]:
    """The C names of the walk's cluster-tile rows and columns (``tile_walk``)."""
    return ("tiles_m", "tiles_nc") if sched.cluster_axis == "n" else ("tiles_mc", "tiles_n")


def tile_coords(sched: WgmmaSchedule, indent: str) -> str:
    """Lines that set ``tm``/``tn``, this block's tile, from ``tile``, its cluster tile's index."""
    rows, cols = cluster_tile_counts(sched)
    return f"{indent}tr_tile_coords(tile, {rows}, {cols}, tm, tn);\n{indent}{rank_fix(sched)}"


def rank_fix(sched: WgmmaSchedule) -> str:
    """The line that moves ``tm``/``tn`` from a cluster tile to this block's tile of it (``rank``)."""
    if sched.cluster_axis == "n":
        return f"tn = tn * {sched.cluster} + rank;"
    return f"tm = tm * {sched.cluster} + rank;"


def cluster_tiles(sched: WgmmaSchedule, m: int, n: int) -> int:
    """Cluster tiles of an ``m`` x ``n`` output: what the walk (and split-K's plan) counts."""
    rows, cols = -(-m // sched.bm), -(-n // sched.bn)
    if sched.cluster_axis == "n":
        return rows * -(-cols // sched.cluster)
    return -(-rows // sched.cluster) * cols


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
