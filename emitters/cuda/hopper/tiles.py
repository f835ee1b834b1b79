"""The tile geometry the Hopper kernels walk: which output tile a persistent index names (``tile_order``: an
L2-friendly raster, ``group`` tile rows or columns at a time), the tile counts and a block's place in the walk
from the runtime ``M`` and ``N`` (``tile_walk``), a cluster's tiles (``cluster_tile_counts``, ``rank_fix``,
``cluster_tiles``). The tile scheduler (``scheduler.py``) and its split-K part (``splitk.py``) are built on
these; the kernels reach them through the scheduler."""

from __future__ import annotations

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
