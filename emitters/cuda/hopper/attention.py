"""The Hopper (sm_90a) attention forward kernel, FlashAttention-3 style (issue 17).

One block per (q tile, head, batch), q tiles fastest in the host plan's longest-first ``order``: the
blocks running together are a few heads' q tiles, which read the same K and V (from L2 after the
first), and the heads sharing a kv head are neighbours. Warpgroup 0 is the producer (``setmaxnreg.dec``):
one thread TMA-loads the Q tile once and, for each k tile of the plan's CSR list only, the K and V tiles
into a ring of ``stages`` (3-d tensor maps over (head dim, sequence, batch x heads), so keys past seq_k
and rows past seq_q read as zeros; a head-dim chunk per box: 64 elements with the 128B swizzle, or where the
head dim is no multiple of 64, 32 with the 64B swizzle or 16 with the 32B one, ``attention_device.head_chunk``).
Each consumer warpgroup (``setmaxnreg.inc``) owns 64 query rows: S = Q K^T by wgmma from shared memory
(both K-major), the element mask on partial tiles only, the online softmax in registers (exp2 of
s * scale_log2), P packed to 16 bits in registers as wgmma's A operand of O += P V (V MN-major: the
transpose bit), O rescaled by the running-max correction; K/V stages released by an mbarrier arrive once
the P V wgmma that read them completed. ``intra``: tile j + 1's S is issued with tile j's P V, and its
softmax runs while P V is in flight. ``pingpong``: the two consumers take turns issuing (named barriers
1 and 2), so one's softmax overlaps the other's matrix products. At the end O /= l (16-bit direct
stores) and lse = ln(sum) per row; a row that kept nothing gets O = 0, lse = -inf.

``persistent``: min(items, ctas x SMs) blocks, block b running the items the host listed for it (``walk_plan``:
greedy list scheduling over groups of heads, each group's q tiles longest first). Per item with tiles the
producer waits for its Q buffer's empty barrier (both consumers arrive once their last S of the item that
used it completed), loads Q, then the item's K/V tiles, the ring's stage and phase running on across
items; the consumers wait Q's full barrier at the item's parity, run the loop as above (the ping-pong
turns balanced within each item: consumer 1 opens, and passes none after its last), release Q, and store.
Items without tiles load nothing and store O = 0, lse = -inf. ``q_buffers`` 2 alternates two Q buffers.

Here: the blocks' heads, the producers and the consumers' entries of both forms, the host's walk and the
launch; the consumers' tile loops and their store are in ``attention_consumer.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...cstyle import CodeWriter
from ..attention_plan import KEEP_FN, PARAMS, mask_scalars, tile_plan
from ..render import CudaRenderer, Rendered
from . import attention_packed as packed
from .attention_consumer import loop_intra, loop_plain, pp_open, store_rows
from .attention_device import (
    MISC,
    head_chunk,
    line_bytes,
    padded_dim,
    swizzle_mode,
    tile_steps,
    wgmma_rs,
    wgmma_ss,
)
from .attention_schedule import AttnWgmmaSchedule, smem_plan
from .mainloop import descriptor_strides
from .ptx import DEVICE_LIB, GATHER_LIB, PTX_TYPE

KERNEL_NAME = "tr_wgmma_attention"
EXTRA_PARAMS = ("order", "tmQ", "tmK", "tmV")  # after the shared PARAMS: q-tile order, then the tensor maps
KERNEL_PARAMS = PARAMS + EXTRA_PARAMS

SIGNATURE = """    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
    uint16_t* __restrict__ out, float* __restrict__ lse, const int* __restrict__ tile_ptr,
    const int* __restrict__ tile_idx, const unsigned char* __restrict__ bmask,
    int batch, int heads, int kv_heads, int seq_q, int seq_k, int diag, int win_left, int win_right,
    int bm_cols, int bm_bq, int bm_bk, float scale_log2, const int* __restrict__ order,
    const __grid_constant__ TrTensorMap tmQ, const __grid_constant__ TrTensorMap tmK,
    const __grid_constant__ TrTensorMap tmV"""


def _v_strides(sched: AttnWgmmaSchedule, d: int) -> tuple[int, int]:
    """(LBO, SBO) of V as wgmma's MN-major B: one head-dim chunk (``bk`` key lines) to the next, and 8 lines."""
    from ...layout import TileLayout, TmaSwizzle

    chunk, line = head_chunk(d), line_bytes(d)
    lay = [TileLayout(sched.bk, chunk, 2, "row", swizzle=TmaSwizzle(swizzle_mode(d)), base_bytes=c * sched.bk * line)
           for c in range(max(2, d // chunk))]
    return descriptor_strides(lay)


def _ring_init(sched: AttnWgmmaSchedule) -> str:
    """Thread 0 opens its block: the tensor maps prefetched, each ring stage's full K, full V and empty barriers."""
    S = sched.stages
    empty_v = f"\n            tr_mbar_init(bars + 8u * ({3 * S} + s), {4 * sched.consumers}u);" if sched.split_kv else ""
    return f"""    if (threadIdx.x == 0) {{
        tr_prefetch_map(&tmQ); tr_prefetch_map(&tmK); tr_prefetch_map(&tmV);
        for (int s = 0; s < {S}; ++s) {{
            tr_mbar_init(bars + 8u * s, 1u);
            tr_mbar_init(bars + 8u * ({S} + s), 1u);
            tr_mbar_init(bars + 8u * ({2 * S} + s), {4 * sched.consumers}u);{empty_v}
        }}
"""


def _head(sched: AttnWgmmaSchedule, d: int, r: CudaRenderer) -> str:
    """From the block's work item to the warpgroup split: barriers initialised and published."""
    sm, S = smem_plan(sched, d), sched.stages
    return f"""    extern __shared__ __align__(1024) unsigned char tr_smem[];
    const uint32_t smem = (tr_smem_addr(tr_smem) + 1023u) & ~1023u;
    const uint32_t bars = smem + {sm['bars']}u;  /* fullK[s] = bars + 8 s, fullV[s] + 8 {S}, empty[s] + 8 {2 * S}{
        f" (K's; V's + 8 {3 * S})" if sched.split_kv else ""} */
    const uint32_t qbar = bars + {8 * sched.barriers_per_stage * S}u;
    const int q_tiles = (seq_q + {sched.bq - 1}) / {sched.bq}, bh = (int)(blockIdx.x / (unsigned)q_tiles);
    const int qt = order[blockIdx.x - (unsigned)bh * q_tiles], b = bh / heads, h = bh - b * heads;
    const int kvh = h / (heads / kv_heads);
    const int e0 = tile_ptr[qt], n = tile_ptr[qt + 1] - e0;
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
{_ring_init(sched)}        tr_mbar_init(qbar, 1u);
        {r.asm("fence.mbarrier_init")}
    }}
    {r.barrier}"""


def _producer(sched: AttnWgmmaSchedule, d: int, r: CudaRenderer, at: dict[str, str] | None = None) -> str:
    """One thread loads Q, then each plan entry's K and V into the ring; ``at``: the TMA coordinates (rows of
    the sequence dimension, then the 3rd dimension) of Q and of K/V (the packed form's differ)."""
    sm, S, chunk, line = smem_plan(sched, d), sched.stages, head_chunk(d), line_bytes(d)
    chunks, bq, bk = d // chunk, sched.bq, sched.bk
    at = at or {"q_row": f"qt * {bq}", "q_z": "bh", "k_row": f"kt * {bk}", "kv_z": "b * kv_heads + kvh"}
    return f"""    if (wg == 0) {{
        {r.asm("setmaxnreg", how="dec", n=sched.register_split()[1])}
        if (tid == 0) {{
            tr_mbar_expect_tx(qbar, {bq * d * 2}u);
            for (int c = 0; c < {chunks}; ++c)
                tr_tma_load_3d(smem + c * {bq * line}u, &tmQ, c * {chunk}, {at['q_row']}, {at['q_z']}, qbar);
            for (int e = 0; e < n; ++e) {{
                const int s = e % {S};
                const int kt = tile_idx[e0 + e] >> 1;
                tr_mbar_wait(bars + 8u * ({2 * S} + s), (uint32_t)((e / {S}) & 1) ^ 1u);
                const uint32_t fk = bars + 8u * s, fv = bars + 8u * ({S} + s);
                const uint32_t ks = smem + {sm['k']}u + s * {sm['stage']}u, vs = ks + {S * sm['stage']}u;
                tr_mbar_expect_tx(fk, {bk * d * 2}u);
                for (int c = 0; c < {chunks}; ++c)
                    tr_tma_load_3d(ks + c * {bk * line}u, &tmK, c * {chunk}, {at['k_row']}, {at['kv_z']}, fk);{
                    _v_wait(sched)}
                tr_mbar_expect_tx(fv, {bk * d * 2}u);
                for (int c = 0; c < {chunks}; ++c)
                    tr_tma_load_3d(vs + c * {bk * line}u, &tmV, c * {chunk}, {at['k_row']}, {at['kv_z']}, fv);
            }}
        }}"""


def _v_wait(sched: AttnWgmmaSchedule) -> str:
    """``split_kv``: the producer waits for the stage's V to be free (its own barrier) before loading the next V;
    K's wait above is then on K's barrier alone."""
    S = sched.stages
    return (f"\n                tr_mbar_wait(bars + 8u * ({3 * S} + s), (uint32_t)((e / {S}) & 1) ^ 1u);"
            if sched.split_kv else "")


def _consumer_entry(sched: AttnWgmmaSchedule, d: int, r: CudaRenderer) -> str:
    sm, bk = smem_plan(sched, d), sched.bk
    return f"""    }} else {{
        {r.asm("setmaxnreg", how="inc", n=sched.register_split()[2])}
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
        const int row0 = qt * {sched.bq} + cw * 64 + warp * 16 + lane / 4;  /* and row0 + 8 */
        const uint32_t qs = smem + cw * {64 * line_bytes(d)}u;
        const uint32_t kbase = smem + {sm['k']}u, vbase = smem + {sm['v']}u;
        float o[{d // 2}], s[{bk // 2}], m[2] = {{TR_NEG_INF, TR_NEG_INF}}, l[2] = {{0.0f, 0.0f}}, corr[2];
        uint32_t p[{bk // 4}];
        #pragma unroll
        for (int i = 0; i < {d // 2}; ++i) o[i] = 0.0f;
        tr_mbar_wait(qbar, 0u);
        if (n > 0) {{
            {pp_open(sched)}"""


def _store(sched: AttnWgmmaSchedule, d: int, pack: str, at: dict[str, str] | None = None) -> str:
    """O /= l (0 where l is 0), 16-bit pairs stored straight from the accumulator fragment; lse per row (``d``:
    the op's head dim, the columns stored)."""
    return store_rows(d, pack, at) + """
    }
}"""


# ------------------------------------------------------------------------------ the persistent form

SIGNATURE_PERSISTENT = SIGNATURE.replace("const int* __restrict__ order", "const int* __restrict__ walk")
PERSISTENT_PARAMS = PARAMS + ("walk", "tmQ", "tmK", "tmV")


def walk_plan(op: Any, sched: AttnWgmmaSchedule, blocks: int) -> np.ndarray:
    """The persistent grid's static schedule (the kernel's ``walk``): ``[blocks, start[0..blocks], items...]``,
    block b running items ``walk[start[b]:start[b + 1]]``, each ``bh * q_tiles + qt``.

    Greedy list scheduling (each item to the block with the least work so far, a tile counting 1 and an
    item's Q load and store 1 more) over the items in groups of ``blocks // q_tiles`` heads (about one wave
    of items), each group's q tiles longest first. So the blocks running together work on a few heads,
    whose K and V stay in L2, the heads sharing a kv head are neighbours, and the slowest block ends less
    than one item after the average (a round-robin over the same list does not: a group of 128 items over
    132 blocks shifts each block's share of long items by 4 a round)."""
    import heapq

    plan = tile_plan(op, sched.bq, sched.bk)
    nq, bhs = plan.q_tiles, op.batch * op.heads
    n = np.diff(plan.ptr)
    hg = max(1, blocks // nq)
    heap = [(0, b) for b in range(blocks)]
    lists: list[list[int]] = [[] for _ in range(blocks)]
    for g0 in range(0, bhs, hg):
        for qt in plan.order:
            for bh in range(g0, min(g0 + hg, bhs)):
                load, b = heapq.heappop(heap)
                lists[b].append(bh * nq + int(qt))
                heapq.heappush(heap, (load + int(n[qt]) + 1, b))
    starts = np.cumsum([blocks + 2] + [len(x) for x in lists])
    return np.concatenate([[blocks], starts, *[np.asarray(x, np.int64) for x in lists]]).astype(np.int32)


def _walk_head(sched: AttnWgmmaSchedule) -> str:
    """Lines opening the item loop (producer and consumers alike): this block's items from the host's
    ``walk``, each item's (qt, bh) and plan entries ``e0 .. e0 + n``."""
    return """        for (int w = walk[1 + blockIdx.x], w_end = walk[2 + blockIdx.x]; w < w_end; ++w) {
            const int bh = walk[w] / q_tiles, qt = walk[w] - bh * q_tiles;
            const int e0 = tile_ptr[qt], n = tile_ptr[qt + 1] - e0;"""


def _head_persistent(sched: AttnWgmmaSchedule, d: int, r: CudaRenderer) -> str:
    """The barriers as ``_head``'s, a full and an empty barrier a Q buffer (a warp of each consumer arrives
    on the empty one once per item)."""
    sm, S, qb = smem_plan(sched, d), sched.stages, sched.q_buffers
    return f"""    extern __shared__ __align__(1024) unsigned char tr_smem[];
    const uint32_t smem = (tr_smem_addr(tr_smem) + 1023u) & ~1023u;
    const uint32_t bars = smem + {sm['bars']}u;  /* fullK[s] = bars + 8 s, fullV[s] + 8 {S}, empty[s] + 8 {2 * S} */
    const uint32_t qbar = bars + {24 * S}u, qempty = qbar + {8 * qb}u;  /* Q buffer j's: qbar + 8 j, qempty + 8 j */
    const int q_tiles = (seq_q + {sched.bq - 1}) / {sched.bq};
    if ((int)blockIdx.x >= walk[0]) return;  /* a grid larger than the walk was built for */
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
{_ring_init(sched)}        for (int j = 0; j < {qb}; ++j) {{
            tr_mbar_init(qbar + 8u * j, 1u);
            tr_mbar_init(qempty + 8u * j, {4 * sched.consumers}u);
        }}
        {r.asm("fence.mbarrier_init")}
    }}
    {r.barrier}"""


def _producer_persistent(sched: AttnWgmmaSchedule, d: int, r: CudaRenderer) -> str:
    """Per item with tiles: wait for the release of its Q buffer (``it % q_buffers``, from the item
    ``q_buffers`` before), load Q, then its K/V tiles into the ring, whose stage and phase run on across
    items (no drain). Items without tiles load nothing."""
    sm, S, QB, chunk, line = smem_plan(sched, d), sched.stages, sched.q_buffers, head_chunk(d), line_bytes(d)
    chunks, bq, bk = d // chunk, sched.bq, sched.bk
    walk = _walk_head(sched).replace("\n", "\n    ")
    return f"""    if (wg == 0) {{
        {r.asm("setmaxnreg", how="dec", n=sched.register_split()[1])}
        if (tid == 0) {{
            int st = 0, it = 0;
            uint32_t ph = 0;
    {walk}
                if (n == 0) continue;
                const int b = bh / heads, kvb = b * kv_heads + (bh - b * heads) / (heads / kv_heads);
                const uint32_t qb = (uint32_t)(it % {QB}), qfull = qbar + 8u * qb;
                tr_mbar_wait(qempty + 8u * qb, ((uint32_t)(it / {QB}) & 1u) ^ 1u);  /* the buffer's last Q is read */
                ++it;
                tr_mbar_expect_tx(qfull, {bq * d * 2}u);
                for (int c = 0; c < {chunks}; ++c)
                    tr_tma_load_3d(smem + qb * {bq * d * 2}u + c * {bq * line}u, &tmQ, c * {chunk}, qt * {bq}, bh,
                                   qfull);
                for (int e = 0; e < n; ++e) {{
                    const int kt = tile_idx[e0 + e] >> 1;
                    tr_mbar_wait(bars + 8u * ({2 * S} + st), ph ^ 1u);
                    const uint32_t fk = bars + 8u * st, fv = bars + 8u * ({S} + st);
                    const uint32_t ks = smem + {sm['k']}u + st * {sm['stage']}u, vs = ks + {S * sm['stage']}u;
                    tr_mbar_expect_tx(fk, {bk * d * 2}u);
                    for (int c = 0; c < {chunks}; ++c)
                        tr_tma_load_3d(ks + c * {bk * line}u, &tmK, c * {chunk}, kt * {bk}, kvb, fk);
                    tr_mbar_expect_tx(fv, {bk * d * 2}u);
                    for (int c = 0; c < {chunks}; ++c)
                        tr_tma_load_3d(vs + c * {bk * line}u, &tmV, c * {chunk}, kt * {bk}, kvb, fv);
                    if (++st == {S}) {{ st = 0; ph ^= 1u; }}
                }}
            }}
        }}"""


def _consumer_persistent(sched: AttnWgmmaSchedule, d: int, r: CudaRenderer, width: int) -> str:
    """Per item: O, m, l cleared; with tiles, its Q buffer's full barrier at the item's parity, the loop (ping-pong
    turns balanced within the item: consumer 1 opens, and passes none after its last), Q released after
    the last S; then O and lse stored (O = 0, lse = -inf for rows that kept nothing)."""
    sm, bk, QB = smem_plan(sched, d), sched.bk, sched.q_buffers
    loop = loop_intra(sched, d) if sched.intra else loop_plain(sched, d)
    loop = "\n".join(("    " + ln) if ln.strip() else ln for ln in loop.split("\n"))
    store = "\n".join(("    " + ln) if ln.strip() else ln for ln in store_rows(width, "tr_pack2").split("\n"))
    opening = pp_open(sched)
    return f"""    }} else {{
        {r.asm("setmaxnreg", how="inc", n=sched.register_split()[2])}
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
        const uint32_t kbase = smem + {sm['k']}u, vbase = smem + {sm['v']}u;
        float o[{d // 2}], s[{bk // 2}], m[2], l[2], corr[2];
        uint32_t p[{bk // 4}];
        int st = 0, it = 0;
        uint32_t ph = 0;
{_walk_head(sched)}
            const int row0 = qt * {sched.bq} + cw * 64 + warp * 16 + lane / 4;  /* and row0 + 8 */
            m[0] = m[1] = TR_NEG_INF;
            l[0] = l[1] = 0.0f;
            #pragma unroll
            for (int j = 0; j < {d // 2}; ++j) o[j] = 0.0f;
            if (n > 0) {{
                const uint32_t qb = (uint32_t)(it % {QB});
                tr_mbar_wait(qbar + 8u * qb, (uint32_t)(it / {QB}) & 1u);
                ++it;
                const uint32_t qs = smem + qb * {sched.bq * d * 2}u + cw * {64 * line_bytes(d)}u, qfree = qempty + 8u * qb;
                {opening}
{loop}
{store}
        }}
    }}
}}"""


def render_source(op: Any, sched: AttnWgmmaSchedule) -> str:
    """CUDA C++ (no headers; NVRTC, ``-arch=sm_90a``) of ``extern "C" tr_wgmma_attention``; parameters
    ``KERNEL_PARAMS`` in order (SIGNATURE). No shape in the source but the head dim."""
    sched.validate(op)
    d, dtype = padded_dim(op.head_dim), op.dtype.value  # the computed head dim; the op's is stored
    r = CudaRenderer()
    w = CodeWriter()
    w(f"/* cuda-wgmma.attention {sched.name}: {dtype}, head dim {d} */")
    w.extend(r.prelude(1))
    w.extend(r.tensor_prelude(dtype))
    w.extend(DEVICE_LIB)
    w.extend(GATHER_LIB)
    w.extend(KEEP_FN)
    w.extend(MISC)
    w.extend(wgmma_ss(sched.bk, PTX_TYPE[dtype]))
    w.extend(wgmma_rs(d, PTX_TYPE[dtype]))
    w.extend(tile_steps(d, sched.bk, sched.bq))
    w(f'extern "C" __global__ void __launch_bounds__({sched.threads}, {sched.ctas}) {KERNEL_NAME}(')
    if getattr(op, "packed", False):
        w(packed.signature(SIGNATURE) + ") {")
        w.extend(_packed_body(sched, d, r, op.head_dim))
        return w.render()
    w((SIGNATURE_PERSISTENT if sched.persistent else SIGNATURE) + ") {")
    if sched.persistent:
        w.extend(_head_persistent(sched, d, r))
        w.extend(_producer_persistent(sched, d, r))
        w.extend(_consumer_persistent(sched, d, r, op.head_dim))
        return w.render()
    w.extend(_head(sched, d, r))
    w.extend(_producer(sched, d, r))
    w.extend(_consumer_entry(sched, d, r))
    w.extend(loop_intra(sched, d) if sched.intra else loop_plain(sched, d))
    w.extend(_store(sched, op.head_dim, "tr_pack2"))
    return w.render()


def _packed_body(sched: AttnWgmmaSchedule, d: int, r: CudaRenderer, width: int) -> str:
    """The packed form (``attention_packed``): its head, the plain producer and consumers at its coordinates,
    its plan entries computed, its store's addressing."""
    head = packed.head(smem_plan(sched, d), sched.stages, sched.barriers_per_stage, sched.bq, sched.bk,
                       _ring_init(sched), r.barrier, r.asm("fence.mbarrier_init"))
    body = (_producer(sched, d, r, packed.coordinates(sched.bq, sched.bk)) + "\n" + _consumer_entry(sched, d, r)
            + "\n" + (loop_intra(sched, d) if sched.intra else loop_plain(sched, d)) + "\n"
            + _store(sched, width, "tr_pack2", packed.addressing()))
    return head + "\n" + packed.plan_entries(body)


def work_items(op: Any, sched: AttnWgmmaSchedule) -> int:
    """(q tile, batch x head) pairs: one block each, or the persistent walk's items; packed, the slots of
    ``attention_packed`` (every entry's q tiles for any offsets) a head."""
    if getattr(op, "packed", False):
        return packed.slots(op.shapes()["q"][0], op.batch, sched.bq) * op.heads
    return -(-op.seq_q // sched.bq) * op.heads * op.batch


def grid_blocks(op: Any, sched: AttnWgmmaSchedule, sm_count: int = 132) -> int:
    """One block a work item; persistent, ``ctas`` an SM (the blocks it holds at once), at most one an item."""
    items = work_items(op, sched)
    return min(items, max(1, sm_count) * sched.ctas) if sched.persistent else items


def render(op: Any, sched: AttnWgmmaSchedule, arch: Any = None) -> tuple[Rendered, dict[str, float | int]]:
    """(Rendered, scalars): the source, a 1-d grid of q tiles x heads x batch, ``sched.threads`` threads,
    the dynamic shared memory; the scalars are the shared ``mask_scalars``. ``arch``: its SM count sizes the
    persistent grid (132 without one; the kernel object takes the device's own at launch)."""
    src = render_source(op, sched)
    d = op.head_dim
    grid = grid_blocks(op, sched, getattr(arch, "sm_count", 0) or 132)
    smem = sched.smem_bytes(d)
    dp = padded_dim(d)  # the head dim computed (the op's rounded up to 16)
    lbo, sbo = _v_strides(sched, dp)
    meta = {
        "name": f"tr_{sched.name}",
        "tile": {"q": sched.bq, "k": sched.bk, "stages": sched.stages, "consumers": sched.consumers,
                 "pingpong": sched.pingpong, "intra": sched.intra,
                 **({"persistent": True, "q_buffers": sched.q_buffers} if sched.persistent else {}),
                 **({"split_kv": True} if sched.split_kv else {}),
                 **({"ctas": sched.ctas} if sched.ctas != 1 else {})},
        "fragments": {"mma": f"wgmma.mma_async m64n{sched.bk}k16 (S, SS) + m64n{dp}k16 (O, RS)",
                      "dtype_in": op.dtype.value, "dtype_acc": "fp32",
                      "load": f"TMA cp.async.bulk.tensor.3d, {swizzle_mode(dp)} swizzle, {head_chunk(dp)}-element "
                              "head-dim chunks" + (f" over head dim {dp} (TMA zeros past {d})" if dp != d else ""),
                      "v_descriptor": {"lbo": lbo, "sbo": sbo}},
        "smem": smem_plan(sched, dp),
        "registers": dict(zip(("entry", "producer", "consumer"), sched.register_split(), strict=True)),
        "launch": {"grid": [grid, 1, 1], "block": [sched.threads, 1, 1], "dynamic_smem": smem},
    }
    if sched.persistent:  # the walk argument is built for the grid launched (the device's SM count)
        meta["launch"]["walk"] = "tracea.emitters.cuda.hopper.attention.walk_plan(op, schedule, grid)"
    params = PERSISTENT_PARAMS if sched.persistent else KERNEL_PARAMS
    scalars = mask_scalars(op)
    name = f"tr_{sched.name}_{op.dtype.value}_d{d}"
    if getattr(op, "packed", False):
        params, name = packed.PACKED_PARAMS, name + "_packed"
        scalars["tokens"] = op.shapes()["q"][0]
        meta["launch"]["packed"] = "grid: (tokens // bq + batch) x heads slots (attention_packed)"
    rendered = Rendered(name, KERNEL_NAME, src, params, (grid, 1, 1), (sched.threads, 1, 1), smem, meta)
    return rendered, scalars


# ------------------------------------------------------------------------------ NumPy models (tests)


def accumulator_model(n: int) -> np.ndarray:
    """(warp, lane, register) -> (row, col) of wgmma's m64nN fp32 accumulator, as the kernel indexes it."""
    out = np.zeros((4, 32, n // 2, 2), np.int64)
    for w_ in range(4):
        for lane in range(32):
            for j in range(n // 8):
                for x in range(4):
                    out[w_, lane, 4 * j + x] = (16 * w_ + lane // 4 + 8 * (x >> 1), 8 * j + 2 * (lane % 4) + (x & 1))
    return out


def fragment_model(bk: int) -> np.ndarray:
    """(warp, lane, k16 step, A register, half) -> (row, key) that ``tr_pack_p`` puts there, from the
    accumulator model: register i of P packs accumulators 2i (low half) and 2i + 1."""
    acc = accumulator_model(bk)
    out = np.zeros((4, 32, bk // 16, 4, 2, 2), np.int64)
    for i in range(bk // 4):
        out[:, :, i // 4, i % 4, 0] = acc[:, :, 2 * i]
        out[:, :, i // 4, i % 4, 1] = acc[:, :, 2 * i + 1]
    return out
