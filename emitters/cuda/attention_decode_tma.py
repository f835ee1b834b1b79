"""The decode kernel's sm_90 loads (issue 33): K and V tiles by TMA on mbarriers instead of every thread's
``cp.async``; the device functions (``DEVICE``), the rule for where they apply (``refusal``) and the two
tensor maps a launch takes (``maps``).

A tile's K (and V) lands as ``HD / 64`` column blocks of ``BK`` rows of 128 bytes, 128B-swizzled (16-byte
chunk c of row r at chunk ``c ^ (r % 8)``), each block 1024-byte aligned, so an ldmatrix phase's 8 rows hit
8 distinct bank groups as the padded rows of the ``cp.async`` fill do. One thread arms the slot's barrier with
the tile's bytes and warp 0's lanes issue the boxes, a lane each: a tile of many small boxes (pages of 16 at head
dim 128: 32) issued by one thread held warp 0, and with it every warp at the next barrier (an H200, Nsight
Compute: 55 % of the paged kernel's stalls at the barrier, against waits for data in the contiguous one):

- contiguous K/V: maps (HD, seq_k, batch x kv_heads), a box (64, BK, 1) a column block; rows past seq_k
  read as zeros;
- paged: maps over the pool (HD, kv_heads, pages x PAGE), a box (64, 1, R) of R = min(PAGE, BK) rows a page
  (PAGE a multiple of 8 dividing BK or divided by it), at the page the entry's table gives, looked up a tile
  ahead and clamped into the pool; past the entry's keys the last key's page again.

Rows past the entry's keys in its last tile (lengths given, or pages: memory the entry does not own, which may
hold anything, NaN included) are masked in S by the element test; their V rows are zeroed in shared memory
after the tile lands (P is 0 there, but 0 x NaN is not).
"""

from __future__ import annotations

from typing import Any

COLS = 64  # columns a box: 128 bytes of a 16-bit type, the 128B swizzle's width
MAP_PARAMS = ("tmk", "tmv")

DEVICE = r"""
/* Byte address of row r, 16-byte chunk ch of a K/V tile slot. */
#if BULK
#define TR_KV(base, r, ch) ((base) + ((ch) >> 3) * (BK * 128) + (r) * 128 + ((((ch) & 7) ^ ((r) & 7)) << 4))
#define TR_BOX_ROWS (PAGE && PAGE < BK ? PAGE : BK)
#else
#define TR_KV(base, r, ch) ((base) + (r) * ROWB + (ch) * 16)
#endif

#if BULK
/* A tile's boxes: TR_NB row boxes of TR_BOX_ROWS keys x HD / 64 column blocks, of K and of V. Warp 0 issues them,
   lane l boxes l, l + 32, ...: every box of one lane is of row box l % TR_NB (TR_NB divides 32). */
#define TR_NB (BK / TR_BOX_ROWS)
#define TR_BOXES (2 * TR_NB * (HD / 64))
static_assert(32 % TR_NB == 0, "a lane's boxes share one page");

/* (paged) the page of this lane's row box of tile kt (the key past the entry's last: the last key's). */
static __device__ __forceinline__ int tr_tma_page(const int* __restrict__ table, int kt, int klen, int lane) {
#if PAGE
    return __ldg(table + (unsigned)min(kt * BK + lane % TR_NB * TR_BOX_ROWS, klen - 1) / PAGE);
#else
    return 0;
#endif
}

/* Tile kt's K and V into their slots, completing on bar (warp 0: lane 0 arms the barrier with the tile's bytes,
   each lane issues its boxes; pg: its row box's page). */
static __device__ __forceinline__ void tr_tma_tile(uint32_t kd, uint32_t vd, const TrTensorMap* mk,
                                                   const TrTensorMap* mv, int kt, int klen, int slab, int kvh,
                                                   int pg, int pages, uint32_t bar, int lane) {
    if (lane == 0) tr_mbar_expect_tx(bar, 4u * BK * HD);
    __syncwarp();
    for (int x = lane; x < TR_BOXES; x += 32) {
        const int j = x % TR_NB, c = x / TR_NB % (HD / 64);
        const bool is_v = x >= TR_BOXES / 2;
        const uint32_t at = c * (BK * 128) + j * (TR_BOX_ROWS * 128);
#if PAGE
        const int t = min(kt * BK + j * TR_BOX_ROWS, klen - 1);
        const int row = min(max(pg, 0), pages - 1) * PAGE + (unsigned)t % PAGE;
        tr_tma_load_3d((is_v ? vd : kd) + at, is_v ? mv : mk, c * 64, kvh, row, bar);
#else
        tr_tma_load_3d((is_v ? vd : kd) + at, is_v ? mv : mk, c * 64, kt * BK, slab, bar);
#endif
    }
}

/* The entry's last tile: V rows valid.. BK zeroed (their keys are not the entry's). */
static __device__ __forceinline__ void tr_tma_zero_tail(uint32_t vd, int valid, int tid) {
    for (int x = valid * (HD / 8) + tid; x < BK * (HD / 8); x += NT) {
        const int r = x / (HD / 8), ch = x % (HD / 8);
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" :: "r"(TR_KV(vd, r, ch)), "r"(0) : "memory");
    }
}
#endif
"""


def refusal(op: Any, bk: int) -> str | None:
    """Why TMA loads cannot fill ``op``'s tiles of ``bk`` keys (None: they can)."""
    if op.head_dim % COLS:
        return f"head dim {op.head_dim} is no multiple of {COLS} (a box's 128-byte rows)"
    page = getattr(op, "page_size", None)
    if page and (page % 8 or (bk % page and page % bk)):
        return f"pages of {page} keys: TMA boxes take pages of a multiple of 8 keys that divide {bk} or that it divides"
    if page and page < bk and 32 % (bk // page):
        return f"pages of {page} keys: {bk // page} boxes a {bk}-key tile, more than a warp's 32 lanes share out"
    return None


def maps(op: Any, bk: int, k_ptr: int, v_ptr: int) -> list[Any]:
    """The K and V tensor maps of a launch over the buffers at ``k_ptr`` and ``v_ptr``."""
    from .tma import encode_tiled

    d = op.head_dim
    if op.page_size:  # the pool (pages, PAGE, kv_heads, HD)
        dims, strides = (d, op.kv_heads, op.pages * op.page_size), (d * 2, op.kv_heads * d * 2)
        box = (COLS, 1, min(op.page_size, bk))
    else:
        dims, strides = (d, op.seq_k, op.batch * op.kv_heads), (d * 2, op.seq_k * d * 2)
        box = (COLS, bk, 1)
    return [encode_tiled(ptr, op.dtype.value, dims, strides, box) for ptr in (k_ptr, v_ptr)]
