"""Split-K for the Hopper kernels: a tile's k loop cut into ``splits`` slices computed by different
blocks, so that shapes with fewer output tiles than SMs (a 128-row projection, 512 x 512 x 16384, a
3x3 conv at batch 1) keep every SM busy.

The persistent walk goes over *work units* instead of tiles (``tr_unit``): the first ``dp_tiles`` units
are whole tiles (data-parallel), the rest are (tile, k slice) pairs, ``splits`` per tile, a tile's slices
adjacent so that they run at the same time. ``split_tail`` splits only the tiles of the last, partial
wave (the rest run whole): the hybrid of data-parallel waves and a split-K tail, which is what stream-K
buys on these shapes; slices are whole k steps (64 elements), not fractions of a block's share.

The fix-up is deterministic and never waits: each slice writes its fp32 partial sums to a workspace in
the accumulators' own register order (one coalesced 16-byte store per four accumulators), fences, and
counts itself on the tile's semaphore; the block that arrives last reads every slice's partial back in
slice order (0, 1, ..., so the sum does not depend on which block came last), resets the semaphore for
the next launch and runs the epilogue (bias, activation, residual, alpha: once, on the full sum). The
others skip their epilogue. No block waits for another, so no co-residency is assumed.

``split_fix = "spread"`` shares that sum instead: every slice counts itself in (``sem[2 slot]``) and waits
until all have, then each sums its own share of the tile's accumulator groups (slice ``sidx`` of
``splits``) over the slices in order and stores those with the direct epilogue; the last to leave
(``sem[2 slot + 1]``) resets both counters. The last block's serial read of every partial (``splits``
times the tile) becomes one tile's worth spread over ``splits`` blocks. Waiting needs every slice of a
tile resident: the walk is persistent (one block per SM at most, all launched together), a tile's slices
are consecutive units and each block takes its units in order, so no block waits on one that has not
started (the host refuses ``splits`` above the grid's blocks).

The slicing is decided on the host from the SM count (``plan``) and passed at run time (``splits``,
``dp_tiles``): one binary serves every shape; ``split = 0`` in a schedule means "as many slices as
fill the SMs" (``AUTO_MAX`` at most, ``MIN_STEPS`` k steps a slice at least).
"""

from __future__ import annotations

from dataclasses import dataclass

from .schedule import BK, WgmmaSchedule
from .scheduler import cluster_tiles, tile_coords

AUTO_MAX = 16
MIN_STEPS = 4  # k steps (of 64) a slice keeps at least, when the split is chosen automatically

UNIT_FN = r"""/* Work unit u -> (tile, k steps [kb, ke), slice index; -1 for a whole tile). */
static __device__ __forceinline__ void tr_unit(int u, int k_iters, int splits, int dp_tiles, int& tile, int& kb,
                                               int& ke, int& sidx) {
    if (u < dp_tiles) { tile = u; kb = 0; ke = k_iters; sidx = -1; return; }
    const int t = u - dp_tiles, q = t / splits;
    tile = dp_tiles + q;
    sidx = t - q * splits;
    kb = (int)((long long)sidx * k_iters / splits);
    ke = (int)((long long)(sidx + 1) * k_iters / splits);
}
"""

PARAMS = ("ws", "sem", "splits", "dp_tiles")
SIGNATURE = "float* __restrict__ ws, int* __restrict__ sem, int splits, int dp_tiles"


@dataclass(frozen=True)
class Plan:
    """How a launch slices k: ``splits`` per split tile, the first ``dp_tiles`` tiles whole; ``units``
    work units in all; the workspace and semaphores the split tiles need."""

    splits: int
    dp_tiles: int
    units: int
    tiles: int
    ws_bytes: int
    sem_count: int
    spread: bool = False  # the spread fix-up: every slice of a tile must be resident at once

    def to_json(self) -> dict[str, int]:
        d = {"splits": self.splits, "dp_tiles": self.dp_tiles, "units": self.units,
             "workspace_bytes": self.ws_bytes, "semaphores": self.sem_count}
        return {**d, "spread": 1} if self.spread else d


def plan(sched: WgmmaSchedule, m: int, n: int, k_iters: int, sm_count: int) -> Plan:
    """The slicing of an ``m`` x ``n`` output with ``k_iters`` k steps on ``sm_count`` SMs."""
    cl = sched.cluster
    tiles = cluster_tiles(sched, m, n)
    slots = max(1, sm_count // cl)
    whole = Plan(1, tiles, tiles, tiles, 0, 0)
    if sched.split == 1 or k_iters < 2:
        return whole
    dp = (tiles // slots) * slots if sched.split_tail else 0
    tail = tiles - dp
    if tail == 0:
        return whole
    if sched.split:
        splits = min(sched.split, k_iters)
    else:
        splits = min(slots // tail, AUTO_MAX, k_iters // MIN_STEPS)
    if splits < 2:
        return whole
    blocks = tail * cl
    sems = blocks * (2 if sched.split_fix == "spread" else 1)
    return Plan(splits, dp, dp + tail * splits, tiles, blocks * splits * sched.bm * sched.bn * 4, sems,
                sched.split_fix == "spread")


def k_steps(k: int) -> int:
    return -(-k // BK)


def unit_loop_head(sched: WgmmaSchedule, indent: str) -> str:
    """The producer's walk over its units, the unit decoded (``tile``, ``kb``, ``ke``)."""
    return (f"{indent}for (int unit = cluster_id; unit < units; unit += clusters) {{\n"
            f"{indent}    int tile, kb, ke, sidx;\n"
            f"{indent}    tr_unit(unit, k_iters, splits, dp_tiles, tile, kb, ke, sidx);")


def consumer_head(sched: WgmmaSchedule) -> str:
    """The consumers' walk over every unit of the block, keeping the ring position (``it0``) as units of
    unequal length go by; a ping-pong consumer skips the other's units."""
    S = sched.stages
    skip = f"\n            if (j % {sched.tile_walkers} != walk) continue;" if sched.tile_walkers > 1 else ""
    return f"""        long long it_next = 0;  /* ring steps of this block's units before the current one */
        for (int j = 0, unit = cluster_id; unit < units; ++j, unit += clusters) {{
            int tile, kb, ke, sidx;
            tr_unit(unit, k_iters, splits, dp_tiles, tile, kb, ke, sidx);
            const long long it0 = it_next;
            it_next += ke - kb;{skip}
            int tm, tn;
{tile_coords(sched, "            ")}
            int s = (int)(it0 % {S});
            uint32_t phase = (uint32_t)((it0 / {S}) & 1);"""


def fixup(sched: WgmmaSchedule) -> str:
    """After a split unit's mainloop: park the partial, count it, and let the tile's last unit sum the
    slices in order into ``acc`` (the others ``continue`` to their next unit); "spread": see ``spread``."""
    if sched.split_fix == "spread":
        return spread(sched)
    ms, q4 = sched.m_slices, sched.bn // 8  # float4 groups of accumulators per m64 slice
    tile4 = sched.bm * sched.bn // 4
    flag = f"bars + {8 * (2 * sched.stages + 2)}u"  # a word after the mbarriers (``smem_bytes`` counts it)
    sync, leader = _barrier(sched)
    if sched.pingpong:
        flag = f"{flag} + 4u * cw"
    return f"""            if (sidx >= 0) {{  /* split-K: this unit is one k slice of its tile */
{_park(sched)}
                {sync}
                if ({leader}) {{
                    const int last = atomicAdd(sem + slot, 1) == splits - 1;
                    if (last) sem[slot] = 0;  /* ready for the next launch */
                    asm volatile("st.shared.b32 [%0], %1;\\n" :: "r"({flag}), "r"(last) : "memory");
                }}
                {sync}
                int last;
                asm volatile("ld.shared.b32 %0, [%1];\\n" : "=r"(last) : "r"({flag}) : "memory");
                if (!last) continue;
                __threadfence();
{_sum_slices(ms * q4, q4, tile4)}
            }}"""


def _sum_slices(floats4: int, q4: int, tile4: int) -> str:
    """The last unit's sum of every slice's partial, in slice order, into ``acc``: ``floats4`` float4
    groups a thread, read ``chunk`` at a time. Up to 16 at once the loads of a slice all fly together;
    beyond that (128 accumulators a thread, against ptxas's 168-register cap) 8 at a time, a compiler
    barrier between chunks so the loads are not all hoisted above the adds (that spilled)."""
    chunk = floats4 if floats4 <= 16 else 8
    fence = "" if chunk == floats4 else '\n                        asm volatile("" ::: "memory");'
    return f"""                #pragma unroll
                for (int c = 0; c < {floats4 // chunk}; ++c) {{
                    for (int s2 = 0; s2 < splits; ++s2) {{  /* slice order: the same sum whoever came last */
                        const float4* const src = part_ws + (size_t)s2 * {tile4} + c * {chunk * 128} + tid;
                        float4 v[{chunk}];
                        #pragma unroll
                        for (int e = 0; e < {chunk}; ++e) v[e] = __ldcg(src + e * 128);
                        #pragma unroll
                        for (int e = 0; e < {chunk}; ++e) {{
                            float* const a = &acc[(c * {chunk} + e) / {q4}][4 * ((c * {chunk} + e) % {q4})];
                            if (s2 == 0) {{ a[0] = v[e].x; a[1] = v[e].y; a[2] = v[e].z; a[3] = v[e].w; }}
                            else {{ a[0] += v[e].x; a[1] += v[e].y; a[2] += v[e].z; a[3] += v[e].w; }}
                        }}{fence}
                    }}
                }}"""


def _barrier(sched: WgmmaSchedule) -> tuple[str, str]:
    """(the barrier of the threads that share a unit, the thread that speaks for them)."""
    if sched.pingpong:
        return 'asm volatile("bar.sync %0, 128;\\n" :: "r"(1 + cw) : "memory");', "tid == 0"
    return f'asm volatile("bar.sync 3, {128 * sched.consumers};\\n" ::: "memory");', "cw == 0 && tid == 0"


def _park(sched: WgmmaSchedule) -> str:
    """A slice's partial sums into the workspace, in the accumulators' register order (float4 stores)."""
    ms, q4, tile4 = sched.m_slices, sched.bn // 8, sched.bm * sched.bn // 4
    return f"""                const int slot = (tile - dp_tiles) * {sched.cluster} + rank;
                float4* const part_ws = reinterpret_cast<float4*>(ws) + (size_t)slot * splits * {tile4} + part * {ms * q4 * 128};
                float4* const mine = part_ws + (size_t)sidx * {tile4};
                #pragma unroll
                for (int i = 0; i < {ms}; ++i) {{
                    #pragma unroll
                    for (int q = 0; q < {q4}; ++q)
                        __stcg(mine + (i * {q4} + q) * 128 + tid, make_float4(acc[i][4 * q], acc[i][4 * q + 1],
                                                                          acc[i][4 * q + 2], acc[i][4 * q + 3]));
                }}
                __threadfence();"""


def spread(sched: WgmmaSchedule) -> str:
    """The spread fix-up: park, arrive and wait for every slice of the tile, sum this slice's share of the
    accumulator groups ([g0, g1) of ``floats4`` a thread, every slice in order), leave (the last resets
    the counters). ``g0``/``g1`` stay in scope for the epilogue, which stores only those groups (whole
    tiles: all of them)."""
    ms, q4 = sched.m_slices, sched.bn // 8
    floats4, tile4 = ms * q4, sched.bm * sched.bn // 4
    sync, leader = _barrier(sched)
    return f"""            int g0 = 0, g1 = {floats4};  /* the accumulator groups this unit stores */
            if (sidx >= 0) {{  /* split-K, spread fix-up: this unit is one k slice of its tile */
{_park(sched)}
                {sync}
                if ({leader}) {{
                    atomicAdd(sem + 2 * slot, 1);
                    int seen;
                    do {{
                        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\\n" : "=r"(seen) : "l"(sem + 2 * slot) : "memory");
                    }} while (seen < splits);
                }}
                {sync}
                __threadfence();
                g0 = (int)((long long)sidx * {floats4} / splits);
                g1 = (int)((long long)(sidx + 1) * {floats4} / splits);
{_sum_share(floats4, q4, tile4)}
                {sync}
                if ({leader} && atomicAdd(sem + 2 * slot + 1, 1) == splits - 1) {{
                    sem[2 * slot] = 0;  /* every slice has passed its wait: ready for the next launch */
                    sem[2 * slot + 1] = 0;
                }}
            }}"""


def _sum_share(floats4: int, q4: int, tile4: int) -> str:
    """The spread fix-up's sum of groups [g0, g1) over every slice in order; chunks of 8 groups behind a
    compiler barrier where a thread holds more than 16 (as ``_sum_slices``: hoisted loads spilled)."""
    chunk = floats4 if floats4 <= 16 else 8
    fence = "" if chunk == floats4 else '\n                    asm volatile("" ::: "memory");'
    return f"""                #pragma unroll
                for (int c = 0; c < {floats4 // chunk}; ++c) {{
                    if ((c + 1) * {chunk} <= g0 || c * {chunk} >= g1) continue;
                    for (int s2 = 0; s2 < splits; ++s2) {{  /* slice order: the same sum on every run */
                        const float4* const src = part_ws + (size_t)s2 * {tile4} + c * {chunk * 128} + tid;
                        #pragma unroll
                        for (int e = 0; e < {chunk}; ++e) {{
                            const int g = c * {chunk} + e;
                            if (g < g0 || g >= g1) continue;
                            const float4 v = __ldcg(src + e * 128);
                            float* const a = &acc[g / {q4}][4 * (g % {q4})];
                            if (s2 == 0) {{ a[0] = v.x; a[1] = v.y; a[2] = v.z; a[3] = v.w; }}
                            else {{ a[0] += v.x; a[1] += v.y; a[2] += v.z; a[3] += v.w; }}
                        }}
                    }}{fence}
                }}"""
