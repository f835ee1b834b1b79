"""Split-K for the Hopper kernels, the tile scheduler's second walk (``scheduler.py`` joins it to the
data-parallel one): a tile's k loop cut into ``splits`` slices computed by different blocks, so that
shapes with fewer output tiles than SMs (a 128-row projection, 512 x 512 x 16384, a 3x3 conv at batch 1)
keep every SM busy.

The persistent walk goes over *work units* instead of tiles (``tr_unit``): the first ``dp_tiles`` units
are whole tiles (data-parallel), the rest are (tile, k slice) pairs, ``splits`` per tile, a tile's slices
adjacent so that they run at the same time. ``split_tail`` splits only the tiles of the last, partial
wave (the rest run whole): the hybrid of data-parallel waves and a split-K tail, which is what stream-K
buys on these shapes; slices are whole k steps (64 elements), not fractions of a block's share.

The fix-up is deterministic and waits only on running blocks: each slice takes a ticket on its tile's
semaphore; every slice but the last writes its fp32 partial sums to a workspace in the accumulators' own
register order (one coalesced 16-byte store per four accumulators) and, after the block's barrier, its
leader counts it parked with a release add;
the slice that took the last ticket waits for those counts, reads the others' partials back and sums
every slice in slice order (0, 1, ..., its own from registers, so the sum does not depend on which block
came last), resets both counters for the next launch and runs the epilogue (bias, activation, residual,
alpha: once, on the full sum). The others skip their epilogue. A block waits only on blocks that have
taken their ticket (running, and parking without waiting), so no co-residency is assumed.

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

from ..render import CudaRenderer
from .schedule import BK, WgmmaSchedule
from .tiles import cluster_tiles, tile_coords

AUTO_MAX = 16
# k steps (of 64) a slice keeps at least, when the split is chosen automatically: with fewer, the fix-up
# outweighs the slice (ResNet-50's 1x1 conv n1 c2048 7x7 k512, 32 k steps: 8 slices 0.81x cuDNN, 4 slices
# 0.83-0.84x, 2 slices 0.78x; docs/device-runs/h100-splitk-tail-and-suite/conv1x1-split-forms)
MIN_STEPS = 8
WINDOW = 3  # other slices whose loads the last unit keeps in flight at once
SHARE_WINDOW = 8  # (group, slice) loads a spread unit keeps in flight at once (``_sum_share``)

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
    sems = blocks * 2  # a ticket and a count (last), or arrivals and departures (spread)
    return Plan(splits, dp, dp + tail * splits, tiles, blocks * splits * sched.bm * sched.bn * 4, sems,
                sched.split_fix == "spread")


def spread_blocks(plan: dict, metadata: dict) -> int:
    """The blocks a split-K plan needs resident at once: with the spread fix-up every slice of a tile waits for all
    the others, and a cluster of blocks takes one slice (its blocks the tile's parts), so ``splits`` clusters; 1
    otherwise. (A grid of fewer clusters would have a cluster wait on a slice it is to run itself later.)"""
    if not plan.get("spread"):
        return 1
    return int(plan["splits"]) * int(metadata.get("tile", {}).get("cluster", 1))


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


def fixup(sched: WgmmaSchedule, r: CudaRenderer) -> str:
    """After a split unit's mainloop: take a ticket on the tile (``sem[2 slot]``); every unit but the
    tile's last parks its partial, then counts itself parked (``sem[2 slot + 1]``) and ``continue``s to
    its next unit; the last waits until the others have parked, resets both counters for the next launch
    and sums every slice in slice order into ``acc``, its own from its registers (the sum does not
    depend on which unit came last). It waits only on units that have taken their ticket, which are
    running and park without waiting, so no co-residency is assumed. Taking the ticket first spares the
    last unit, which is on the kernel's critical path, its own park and fence (the H100 timelines of
    512 x 512 x 16384, docs/device-runs/h100-splitk-tail-and-suite: park 1.6 µs, sum 2.2 µs before). "spread": see
    ``spread``."""
    if sched.split_fix == "spread":
        return spread(sched, r)
    ms, q4 = sched.m_slices, sched.bn // 8  # float4 groups of accumulators per m64 slice
    tile4 = sched.bm * sched.bn // 4
    flag = f"bars + {8 * (2 * sched.stages + 2)}u"  # a word after the mbarriers (``smem_bytes`` counts it)
    sync, leader = _barrier(sched, r)
    if sched.pingpong:
        flag = f"{flag} + 4u * cw"
    chunk = sum_shape(sched)
    in_place = chunk == 0  # no room for a running sum: the last unit parks its own slice too
    own_park = _park(sched) if in_place else ""
    total = _sum_all(ms * q4, q4, tile4, r) if in_place else _sum_slices(ms * q4, q4, tile4, chunk, r)
    return f"""            if (sidx >= 0) {{  /* split-K: this unit is one k slice of its tile */
{_slot(sched)}
                {sync}
                if ({leader}) {{
                    const int last = atomicAdd(sem + 2 * slot, 1) == splits - 1;  /* the tile's ticket */
                    {r.asm("st.shared.b32", addr=flag, value="last")}
                }}
                {sync}
                int last;
                {r.asm("ld.shared.b32", value="last", addr=flag)}
                if (!last) {{
{_park(sched)}
                    {sync}
                    if ({leader}) {r.asm("red.release.gpu.add", addr="sem + 2 * slot + 1")}  /* parked: every thread's stores released */
                    continue;
                }}
{own_park}
                if ({leader}) {{
                    int seen;
                    do {{
                        {r.asm("ld.acquire.gpu", value="seen", addr="sem + 2 * slot + 1")}
                    }} while (seen < splits - 1);
                    sem[2 * slot] = 0;  /* every other slice has parked: ready for the next launch */
                    sem[2 * slot + 1] = 0;
                }}
                {sync}  /* the leader's acquire, then the barrier, orders every thread's loads after the parks */
{total}
            }}"""


def _sum_slices(floats4: int, q4: int, tile4: int, chunk: int, r: CudaRenderer, window: int = WINDOW) -> str:
    """The last unit's sum of every slice's partial, in slice order, into ``acc``: ``floats4`` float4
    groups a thread, ``chunk`` groups at a time. The other slices' loads go out ``window`` at a time
    (other slice ``o`` is slice ``o + (o >= sidx)``), then the adds in slice order into ``run``; the
    unit's own slice (still in ``acc``) is folded in between slices ``sidx - 1`` and ``sidx + 1``;
    ``run`` goes back into ``acc`` at the chunk's end, behind a compiler barrier (loads hoisted across
    chunks spilled)."""
    def add(dst: str, src: str) -> str:
        return "; ".join(f"{dst}.{c} += {src}.{c}" for c in "xyzw") + ";"

    own = "make_float4(a[0], a[1], a[2], a[3])"
    return f"""                #pragma unroll
                for (int c = 0; c < {-(-floats4 // chunk)}; ++c) {{
                    float4 run[{chunk}];
                    #pragma unroll
                    for (int e = 0; e < {chunk}; ++e) {{  /* the own slice: where the sum starts if sidx is 0 */
                        const int g = min(c * {chunk} + e, {floats4 - 1});
                        const float* const a = &acc[g / {q4}][4 * (g % {q4})];
                        run[e] = {own};
                    }}
                    for (int o0 = 0; o0 < splits - 1; o0 += {window}) {{  /* {window} other slices' loads in flight */
                        float4 v[{window}][{chunk}];
                        #pragma unroll
                        for (int j = 0; j < {window}; ++j) {{
                            const int o = o0 + j, s2 = o + (o >= sidx);
                            if (o >= splits - 1) continue;
                            const float4* const src = part_ws + (size_t)s2 * {tile4} + c * {chunk * 128} + tid;
                            #pragma unroll
                            for (int e = 0; e < {chunk}; ++e)
                                if (c * {chunk} + e < {floats4}) v[j][e] = __ldcg(src + e * 128);
                        }}
                        #pragma unroll
                        for (int j = 0; j < {window}; ++j) {{  /* slice order: the same sum whoever came last */
                            const int o = o0 + j, s2 = o + (o >= sidx);
                            if (o >= splits - 1) break;
                            #pragma unroll
                            for (int e = 0; e < {chunk}; ++e) {{
                                const int g = min(c * {chunk} + e, {floats4 - 1});
                                const float* const a = &acc[g / {q4}][4 * (g % {q4})];
                                if (s2 == sidx + 1 && sidx > 0) {{ const float4 m = {own}; {add("run[e]", "m")} }}
                                if (s2 == 0) run[e] = v[j][e];
                                else {{ {add("run[e]", "v[j][e]")} }}
                            }}
                        }}
                    }}
                    #pragma unroll
                    for (int e = 0; e < {chunk}; ++e) {{
                        const int g = c * {chunk} + e;
                        if (g >= {floats4}) continue;
                        float* const a = &acc[g / {q4}][4 * (g % {q4})];
                        if (sidx == splits - 1 && sidx > 0) {{ const float4 m = {own}; {add("run[e]", "m")} }}
                        a[0] = run[e].x; a[1] = run[e].y; a[2] = run[e].z; a[3] = run[e].w;
                    }}
                    {r.asm("compiler.fence")}
                }}"""


def _sum_all(floats4: int, q4: int, tile4: int, r: CudaRenderer) -> str:
    """The in-place sum for units whose accumulators leave no room for a running sum (``sum_shape``):
    every slice's partial read back (the unit parked its own too) in slice order into ``acc``, ``chunk``
    groups at a time; up to 16 at once the loads of a slice all fly together; beyond that (128
    accumulators a thread, against ptxas's 168-register cap) 8 at a time, a compiler barrier between
    chunks so the loads are not all hoisted above the adds (that spilled)."""
    chunk = floats4 if floats4 <= 16 else 8
    fence = "" if chunk == floats4 else "\n                        " + r.asm("compiler.fence")
    tail = floats4 % chunk != 0  # (tiles of a width off 64: 20 groups of 8, say; the last chunk's missing are skipped)
    guard = f"if (c * {chunk} + e < {floats4}) " if tail else ""
    stop = f"\n                            if (c * {chunk} + e >= {floats4}) break;" if tail else ""
    return f"""                #pragma unroll
                for (int c = 0; c < {-(-floats4 // chunk)}; ++c) {{
                    for (int s2 = 0; s2 < splits; ++s2) {{  /* slice order: the same sum whoever came last */
                        const float4* const src = part_ws + (size_t)s2 * {tile4} + c * {chunk * 128} + tid;
                        float4 v[{chunk}];
                        #pragma unroll
                        for (int e = 0; e < {chunk}; ++e) {guard}v[e] = __ldcg(src + e * 128);
                        #pragma unroll
                        for (int e = 0; e < {chunk}; ++e) {{{stop}
                            float* const a = &acc[(c * {chunk} + e) / {q4}][4 * ((c * {chunk} + e) % {q4})];
                            if (s2 == 0) {{ a[0] = v[e].x; a[1] = v[e].y; a[2] = v[e].z; a[3] = v[e].w; }}
                            else {{ a[0] += v[e].x; a[1] += v[e].y; a[2] += v[e].z; a[3] += v[e].w; }}
                        }}{fence}
                    }}
                }}"""


def sum_shape(sched: WgmmaSchedule) -> int:
    """Groups the last unit sums at a time: what fits beside the accumulators under the register cap ptxas
    compiles the block for: ``WINDOW`` slices and the running sum take 16 registers a group, ~8 more go to
    addresses; at most 5 groups where a thread holds two m64 slices (4 under a 168-register cap), 8
    otherwise. Found by compiling the split search spaces, a fused bias + gelu + residual epilogue
    included, without spills. 0 (more than 64 accumulators, or under 4 groups): ``fixup`` sums in place
    instead (``_sum_all``)."""
    cap = sched.register_split()[0]
    spare = cap - sched.accumulators - 8
    most = 8 if sched.m_slices == 1 else 5 if cap >= 200 else 4  # 256 x 64, two consumers: 4 (5 spilled 8 B)
    chunk = min(most, sched.m_slices * sched.bn // 8, spare // 16)
    return chunk if chunk >= 4 and sched.accumulators <= 64 else 0


def _barrier(sched: WgmmaSchedule, r: CudaRenderer) -> tuple[str, str]:
    """(the barrier of the threads that share a unit, the thread that speaks for them). Every consumer's own
    barrier is named 1 + cw (the epilogue's too), so the consumers' shared one takes an id past them all: 3 up to
    two consumers, 1 + consumers beyond (with three, id 3 was consumer 2's 128-thread barrier and the fix-up's
    384-thread one at once; such forms ended in CUDA_ERROR_ILLEGAL_INSTRUCTION on an H200; with the id past them
    they ran right and sanitizer-clean there, docs/device-runs/h200-three-consumer-split-forms/)."""
    if sched.pingpong:
        return r.asm("bar.sync", threads=128, id="1 + cw"), "tid == 0"
    return r.asm("bar.sync.const", id=max(3, 1 + sched.consumers), threads=128 * sched.consumers), \
        "cw == 0 && tid == 0"


def _slot(sched: WgmmaSchedule) -> str:
    """The tile's semaphore slot and this unit's place in the workspace (``part_ws``: the tile's slices)."""
    ms, q4, tile4 = sched.m_slices, sched.bn // 8, sched.bm * sched.bn // 4
    return f"""                const int slot = (tile - dp_tiles) * {sched.cluster} + rank;
                float4* const part_ws = reinterpret_cast<float4*>(ws) + (size_t)slot * splits * {tile4} + part * {ms * q4 * 128};"""


def _park(sched: WgmmaSchedule) -> str:
    """A slice's partial sums into the workspace, in the accumulators' register order (float4 stores);
    the block's barrier and its leader's add with release semantics at GPU scope (``red.release.gpu.add``:
    every thread's parked stores before the barrier visible to whoever acquires the count, CUTLASS's
    ``arrive_inc``) publish them."""
    ms, q4, tile4 = sched.m_slices, sched.bn // 8, sched.bm * sched.bn // 4
    return f"""                float4* const mine = part_ws + (size_t)sidx * {tile4};
                #pragma unroll
                for (int i = 0; i < {ms}; ++i) {{
                    #pragma unroll
                    for (int q = 0; q < {q4}; ++q)
                        __stcg(mine + (i * {q4} + q) * 128 + tid, make_float4(acc[i][4 * q], acc[i][4 * q + 1],
                                                                          acc[i][4 * q + 2], acc[i][4 * q + 3]));
                }}"""


def spread(sched: WgmmaSchedule, r: CudaRenderer) -> str:
    """The spread fix-up: park, arrive and wait for every slice of the tile, sum this slice's share of the
    accumulator groups ([g0, g1) of ``floats4`` a thread, every slice in order), leave (the last resets
    the counters). ``g0``/``g1`` stay in scope for the epilogue, which stores only those groups (whole
    tiles: all of them)."""
    ms, q4 = sched.m_slices, sched.bn // 8
    floats4, tile4 = ms * q4, sched.bm * sched.bn // 4
    sync, leader = _barrier(sched, r)
    return f"""            int g0 = 0, g1 = {floats4};  /* the accumulator groups this unit stores */
            if (sidx >= 0) {{  /* split-K, spread fix-up: this unit is one k slice of its tile */
{_slot(sched)}
{_park(sched)}
                {sync}
                if ({leader}) {{
                    {r.asm("red.release.gpu.add", addr="sem + 2 * slot")}  /* arrived: every thread's stores released */
                    int seen;
                    do {{
                        {r.asm("ld.acquire.gpu", value="seen", addr="sem + 2 * slot")}
                    }} while (seen < splits);
                }}
                {sync}  /* the leader's acquire, then the barrier: as the last fix-up's wait */
                g0 = (int)((long long)sidx * {floats4} / splits);
                g1 = (int)((long long)(sidx + 1) * {floats4} / splits);
{_sum_share(floats4, q4, tile4)}
                {sync}
                if ({leader} && atomicAdd(sem + 2 * slot + 1, 1) == splits - 1) {{
                    sem[2 * slot] = 0;  /* every slice has passed its wait: ready for the next launch */
                    sem[2 * slot + 1] = 0;
                }}
            }}"""


def _sum_share(floats4: int, q4: int, tile4: int, window: int = SHARE_WINDOW) -> str:
    """The spread fix-up's sum of groups [g0, g1) over every slice in order. The (group, slice) pairs of the share
    are walked flat, ``window`` loads in flight at a time whatever the split: a share is one group of 32 slices at
    32 slices of a 128 x 128 tile, eight groups of 2 at 2. A group's running sum goes into its accumulators once its
    last slice is added, through a select over every group (registers are indexed only by constants). Loading one
    slice at a time instead left one L2 round trip a slice on the critical path: 128 x 128 tiles at 256 x 256 x 16384
    ran 23.8 us over 16 slices and 31.9 over 32 (H200, docs/device-runs/h200-mid-m-gemm/call13)."""
    sel = "\n".join(f"                            if (g == {g}) {{ acc[{g // q4}][{4 * (g % q4)}] = run.x; "
                     f"acc[{g // q4}][{4 * (g % q4) + 1}] = run.y; acc[{g // q4}][{4 * (g % q4) + 2}] = run.z; "
                     f"acc[{g // q4}][{4 * (g % q4) + 3}] = run.w; }}" for g in range(floats4))
    return f"""                {{
                    const int pairs = (g1 - g0) * splits;  /* (group, slice) pairs of this unit's share */
                    float4 run = make_float4(0.f, 0.f, 0.f, 0.f);
                    for (int t0 = 0; t0 < pairs; t0 += {window}) {{
                        float4 v[{window}];
                        #pragma unroll
                        for (int j = 0; j < {window}; ++j) {{
                            const int t = t0 + j, gq = t / splits, g = g0 + gq, s2 = t - gq * splits;
                            if (t < pairs) v[j] = __ldcg(part_ws + (size_t)s2 * {tile4} + g * 128 + tid);
                        }}
                        #pragma unroll
                        for (int j = 0; j < {window}; ++j) {{  /* slice order: the same sum on every run */
                            const int t = t0 + j, gq = t / splits, g = g0 + gq, s2 = t - gq * splits;
                            if (t >= pairs) break;
                            if (s2 == 0) run = v[j];
                            else {{ run.x += v[j].x; run.y += v[j].y; run.z += v[j].z; run.w += v[j].w; }}
                            if (s2 != splits - 1) continue;
{sel}
                        }}
                    }}
                }}"""
