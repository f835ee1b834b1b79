"""The decode attention kernel's CUDA source (issue 33): flash-decoding on mma.sync m16n8k16.

Decode has few query rows (1 to 16 queries) over a long key sequence: one block per q tile would leave the
GPU idle and read K and V at a fraction of the device's bandwidth. So the rows of every query head that
reads one kv head are packed into one 16-row tile (grouped-query attention: ``heads / kv_heads`` heads x
``seq_q`` queries; row r is head ``r / seq_q`` of the group, query ``r % seq_q``, the order q, out and lse
already have in memory), and the keys are split three ways:

- across blocks: the tiles of keys the rows keep (``[lo, hi)`` from the causal band and the window) are cut
  into ``SPLITS`` slices, one block each (grid: slices x row tiles, kv heads, batch);
- across warps: a block's K/V tile of ``BK`` keys is shared by its warps, warp w taking keys
  ``[16 KW w, 16 KW (w + 1))`` of it; every warp holds the same Q fragments (registers, loaded once; over
  head dim 128, where O fills the registers, re-read from shared memory at each step);
- over time: ``STAGES`` K/V tiles in a cp.async ring, one group per tile (K and V together), one barrier
  per tile.

Each warp keeps its own online softmax (rows g and g + 8 of the m16 tile, as the prefill kernel). After the
walk, the warps' (max, sum, O) meet in shared memory and are combined in warp order; with one slice the
block writes O / sum and the log-sum-exp. With more, each slice parks its (max, sum, unnormalised O) in the
workspace and arrives at its row tile's counter (split_arrival.py); the last to arrive combines every
slice in slice order (the same bits whichever block arrives last), writes O and lse and resets the counter.

Serving (kernels/ops/attention.py): with ``RAGGED`` entry b holds ``seq_lens[b]`` keys (clamped to
``seq_k``), its diagonal aligned there; with ``PAGE`` > 0 K and V are a pool of pages (pages, PAGE, kv_heads,
HD) and key t of entry b is row t % PAGE of page ``block_table[b][t / PAGE]`` (clamped into the pool: the
host checks the table before a launch, and a table it did not check still reads no memory outside the pool).
Each thread looks up the pages of the rows it copies a tile before it copies them (their latency hides behind
a tile's compute), once for K and V.

Rows are padded in shared memory (a row of ``HD`` 16-bit elements, then 16 bytes): an ldmatrix phase's 8
rows start 4 banks apart, so they hit 8 distinct bank groups for every head dim that is a multiple of 16,
where the prefill kernel's XOR swizzle needs 64. Keys past ``seq_k`` load as zeros and are masked.
"""

from __future__ import annotations

from .attention_decode_merge import tail
from .attention_decode_tma import DEVICE as TMA_DEVICE
from .render import CudaRenderer

HEAD = r"""
#define BK __BK__
#define HD __HD__
#define STAGES __STAGES__
#define WARPS __WARPS__
#define SPLITS __SPLITS__
#define MASKED __MASKED__
#define RAGGED __RAGGED__
#define PAGE __PAGE__
#define ADAPT __ADAPT__
#define FULL __FULL__
#define MIN_TILES __MIN_TILES__
#define SLICE_TILES __SLICE_TILES__
#define BULK __BULK__
#define KW (BK / (16 * WARPS))
#define NT (WARPS * 32)
#define CH (HD / 8)
#define ROWB (HD * 2 + 16)
#define TR_LN2 0.6931471805599453f

static __device__ __forceinline__ float tr_dex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* ROWS rows of HD elements from src (row r at src + r * HD) into the padded tile at dst; rows >= valid are
   zero-filled. */
template <int ROWS>
static __device__ __forceinline__ void tr_dec_fill(uint32_t dst, const uint16_t* __restrict__ src, int valid, int tid) {
    #pragma unroll
    for (int i = 0; i < (ROWS * CH + NT - 1) / NT; ++i) {
        const int c = tid + i * NT;
        if ((ROWS * CH) % NT == 0 || c < ROWS * CH) {
            const int r = c / CH, ch = c % CH;
            const bool ok = r < valid;
            tr_cp16(dst + r * ROWB + ch * 16, src + (ok ? (size_t)r * HD + ch * 8 : 0), ok ? 16u : 0u);
        }
    }
}

#define TR_EVEN (NT % CH == 0 && BK % (NT / CH) == 0)
#define TR_PR (PAGE && TR_EVEN ? BK / (NT / CH) : 1)  /* rows of a tile a thread copies (paged, even fill) */

/* The pages of this thread's rows of tile kt, looked up a tile ahead of their copy (the loads' latency hides
   behind a tile's compute; K and V share them). A row past the entry's keys looks up nothing: its copy
   zero-fills, and the table may end before it. */
static __device__ __forceinline__ void tr_dec_pages(int (&pg)[TR_PR], const int* __restrict__ table, int kt,
                                                    int klen, int tid) {
#if PAGE && TR_EVEN
    const int t0 = kt * BK + tid / CH;
    #pragma unroll
    for (int i = 0; i < TR_PR; ++i) {
        const int t = t0 + i * (NT / CH);
        pg[i] = t < klen ? __ldg(table + (unsigned)t / PAGE) : 0;
    }
#endif
}

#if PAGE
/* Where key t's row starts: its page (from the entry's table row, clamped into the pool), its row there. */
static __device__ __forceinline__ const uint16_t* tr_dec_row(const uint16_t* __restrict__ base,
                                                             const int* __restrict__ table, int t, int pages,
                                                             int kv_stride) {
    const int pg = min(max(__ldg(table + (unsigned)t / PAGE), 0), pages - 1);
    return base + ((size_t)pg * PAGE + (unsigned)t % PAGE) * kv_stride;
}
#endif

/* A K or V tile: BK rows, keys kt BK.., into the padded slot at dst; rows >= valid zero-filled. Contiguous
   K/V: key t at src + t HD. Paged: through tr_dec_row (src is the pool at this kv head). Where the block's
   threads tile the rows evenly, thread t copies chunk t % CH of rows t / CH + i NT / CH: its offsets are the
   same for every tile (kept in registers), and a whole tile tests nothing (the general fill's index
   arithmetic and row tests took half the loop's instructions). */
static __device__ __forceinline__ void tr_dec_tile(uint32_t dst, const uint16_t* __restrict__ src, int kt, int valid,
                                                   int tid, const int* __restrict__ table, int pages, int kv_stride,
                                                   const int (&pg)[TR_PR]) {
#if TR_EVEN
    constexpr int STEP = NT / CH;
    const int r0 = tid / CH;
    const uint32_t d = dst + r0 * ROWB + (tid % CH) * 16;
#if PAGE  /* the rows' pages came with pg (tr_dec_pages) */
    const int t0 = kt * BK + r0;
    #pragma unroll
    for (int i = 0; i < BK / STEP; ++i) {
        const bool ok = r0 + i * STEP < valid;
        const int p = min(max(pg[i], 0), pages - 1);
        const uint16_t* s = src + ((size_t)p * PAGE + (unsigned)(t0 + i * STEP) % PAGE) * kv_stride + (tid % CH) * 8;
        tr_cp16(d + i * STEP * ROWB, ok ? s : src, ok ? 16u : 0u);
    }
#else
    const uint16_t* s = src + ((size_t)kt * BK + r0) * HD + (tid % CH) * 8;
    if (valid >= BK) {
        #pragma unroll
        for (int i = 0; i < BK / STEP; ++i) tr_cp16(d + i * STEP * ROWB, s + i * STEP * HD, 16u);
    } else {
        #pragma unroll
        for (int i = 0; i < BK / STEP; ++i) {
            const bool ok = r0 + i * STEP < valid;
            tr_cp16(d + i * STEP * ROWB, ok ? s + i * STEP * HD : src, ok ? 16u : 0u);
        }
    }
#endif
#elif PAGE
    #pragma unroll
    for (int i = 0; i < (BK * CH + NT - 1) / NT; ++i) {
        const int c = tid + i * NT;
        if ((BK * CH) % NT == 0 || c < BK * CH) {
            const int r = c / CH, ch = c % CH;
            const bool ok = r < valid;
            const uint16_t* s = ok ? tr_dec_row(src, table, kt * BK + r, pages, kv_stride) + ch * 8 : src;
            tr_cp16(dst + r * ROWB + ch * 16, s, ok ? 16u : 0u);
        }
    }
#else
    tr_dec_fill<BK>(dst, src + (size_t)kt * BK * HD, valid, tid);
#endif
}

__TMA_DEVICE__
extern "C" __global__ void __launch_bounds__(NT, NT > 128 || HD > 128 ? 1 : 2) __NAME__(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
    uint16_t* __restrict__ out, float* __restrict__ lse, const int* __restrict__ tile_ptr,
    const int* __restrict__ tile_idx, const unsigned char* __restrict__ bmask, int batch, int heads,
    int kv_heads, int seq_q, int seq_k, int diag, int win_left, int win_right, int bm_cols, int bm_bq,
    int bm_bk, float scale_log2, float* __restrict__ workspace, const int* __restrict__ block_table,
    const int* __restrict__ seq_lens, int table_cols, int pages__TMAPS__) {
    extern __shared__ __align__(128) unsigned char tr_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, qd = lane & 3;
    const int group = heads / kv_heads, rows = group * seq_q, row_tiles = (rows + 15) / 16;
    const int split = blockIdx.x % SPLITS, rt = blockIdx.x / SPLITS, kvh = blockIdx.y, b = blockIdx.z;
    const int r0 = rt * 16;
    const int pair = (b * kv_heads + kvh) * row_tiles + rt;  /* this row tile's counter and workspace */
    const size_t qrow0 = (size_t)(b * heads + kvh * group) * seq_q + r0;  /* its first row of q, out, lse */
#if RAGGED  /* this entry's keys (clamped to the capacity: a length the host did not check reads no further) */
    const int klen = min(max(__ldg(seq_lens + b), 0), seq_k), kdiag = klen - seq_q;
#else
    const int klen = seq_k, kdiag = diag;
#endif
#if PAGE  /* the pool at this kv head; rows kv_heads HD apart; the entry's table row */
    const int kv_stride = kv_heads * HD;
    const int* const table = block_table + (size_t)b * table_cols;
    const uint16_t* kg = k + (size_t)kvh * HD;
    const uint16_t* vg = v + (size_t)kvh * HD;
#else
    const int kv_stride = HD;
    const int* const table = block_table;
    const uint16_t* kg = k + (size_t)(b * kv_heads + kvh) * seq_k * HD;
    const uint16_t* vg = v + (size_t)(b * kv_heads + kvh) * seq_k * HD;
#endif
    /* the keys some row keeps: query i keeps j with -win_left <= j - i - kdiag <= win_right, j < klen */
    const int lo = max(0, kdiag - win_left);
    const int hi = min(klen, seq_q + kdiag + win_right);
    const int t_lo = lo / BK, t_hi = hi > lo ? (hi + BK - 1) / BK : t_lo;
#if BULK  /* the ring first, 1024-byte aligned (the swizzle's period), then Q, then a barrier a slot */
    const uint32_t sk = (tr_smem_addr(tr_smem) + 1023u) & ~1023u;
    unsigned char* const tr_part = tr_smem + (sk - tr_smem_addr(tr_smem));  /* the warps' partials, after the walk */
    constexpr uint32_t KV_STAGE = BK * HD * 2;
    const uint32_t sv = sk + STAGES * KV_STAGE;
    const uint32_t sq = sk + (2 * STAGES * KV_STAGE > WARPS * 16 * (HD + 2) * 4 ? 2 * STAGES * KV_STAGE
                                                                              : WARPS * 16 * (HD + 2) * 4);
    const uint32_t bars = sq + 16 * ROWB;
#else
    constexpr uint32_t KV_STAGE = BK * ROWB;
    const uint32_t sq = tr_smem_addr(tr_smem);
    const uint32_t sk = sq + 16 * ROWB;
    const uint32_t sv = sk + STAGES * KV_STAGE;
    unsigned char* const tr_part = tr_smem + 16 * ROWB;
#endif

#if ADAPT
    /* Lengths known only now: this entry's slices from every entry's (each block reads them all and reaches
       the same rule, so a row tile's blocks agree on its count). About even lengths: the capacity's plan
       (FULL slices, at least MIN_TILES tiles each). Uneven: the launch's SPLITS slices, at least SLICE_TILES
       tiles each, so the longest entries do not run alone and the short ones are not cut into slivers. */
    __shared__ int tr_red[2][NT / 32];
    int tsum = 0, tmax = 0;
    for (int i = tid; i < batch; i += NT) {
        const int len = min(max(__ldg(seq_lens + i), 0), seq_k), dg = len - seq_q;
        const int l = max(0, dg - win_left), h = min(len, seq_q + dg + win_right);
        const int n = h > l ? (h + BK - 1) / BK - l / BK : 0;
        tsum += n;
        tmax = max(tmax, n);
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        tsum += __shfl_xor_sync(0xffffffffu, tsum, o);
        tmax = max(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
    }
    if (lane == 0) { tr_red[0][warp] = tsum; tr_red[1][warp] = tmax; }
    __syncthreads();
    long long all = 0;
    int most = 0;
    #pragma unroll
    for (int w = 0; w < NT / 32; ++w) { all += tr_red[0][w]; most = max(most, tr_red[1][w]); }
    const int mine = t_hi - t_lo;
    int nsl;
    if (5 * all >= 4LL * most * batch) {
        nsl = min(FULL, max(1, mine / MIN_TILES));
    } else {
        nsl = min(SPLITS, max(1, mine / SLICE_TILES));
    }
    if (split >= nsl) return;  /* a slice this entry does not need (before any copy is in flight) */
#else
    const int nsl = SPLITS;
#endif
    const int per = (t_hi - t_lo + nsl - 1) / nsl;
    const int e0 = min(t_lo + split * per, t_hi), e1 = min(e0 + per, t_hi);

    tr_dec_fill<16>(sq, q + qrow0 * HD, rows - r0, tid);
    TR_CP_COMMIT();
#if BULK  /* thread 0 arms each slot's barrier, warp 0's lanes issue its boxes; the next tile's pages looked up early */
    const int slab = b * kv_heads + kvh;
    int tpg = 0;  /* (paged) the page of this lane's row box of the next tile warp 0 issues */
    if (warp == 0) {
        if (lane == 0) {
            #pragma unroll
            for (int s = 0; s < STAGES; ++s) tr_mbar_init(bars + 8 * s, 1);
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        }
        __syncwarp();
        int pre[STAGES - 1];  /* (paged) every first tile's pages, asked at once */
        #pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) pre[s] = e0 + s < e1 ? tr_tma_page(table, e0 + s, klen, lane) : 0;
        #pragma unroll
        for (int s = 0; s < STAGES - 1; ++s)
            if (e0 + s < e1)
                tr_tma_tile(sk + s * KV_STAGE, sv + s * KV_STAGE, &tmk, &tmv, e0 + s, klen, slab, kvh, pre[s], pages,
                            bars + 8 * s, lane);
        if (e0 + STAGES - 1 < e1) tpg = tr_tma_page(table, e0 + STAGES - 1, klen, lane);
    }
    uint32_t phase = 0;  /* the parity the current slot's barrier completes next */
    TR_CP_WAIT(0);  /* Q has landed */
#else
    int pg[TR_PR];  /* (paged) the pages of the next tile this thread copies */
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int kt = e0 + s;
        if (kt < e1) {
            tr_dec_pages(pg, table, kt, klen, tid);
            tr_dec_tile(sk + s * KV_STAGE, kg, kt, klen - kt * BK, tid, table, pages, kv_stride, pg);
            tr_dec_tile(sv + s * KV_STAGE, vg, kt, klen - kt * BK, tid, table, pages, kv_stride, pg);
        }
        TR_CP_COMMIT();
    }
    if (e0 + STAGES - 1 < e1) tr_dec_pages(pg, table, e0 + STAGES - 1, klen, tid);
    TR_CP_WAIT(STAGES - 1);  /* Q has landed */
#endif
    __syncthreads();
    const uint32_t qa = sq + ((lane & 7) + ((lane >> 3) & 1) * 8) * ROWB + (lane >> 4) * 16;  /* ldmatrix rows of Q */
#if HD <= 128
    uint32_t qf[HD / 16][4];  /* Q's A fragments, held for the walk */
    #pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) tr_ldm4(qf[kk], qa + kk * 32);
#endif
    float o[HD / 8][4];
    #pragma unroll
    for (int t = 0; t < HD / 8; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    float mx0 = TR_NEG_INF, mx1 = TR_NEG_INF, l0 = 0.f, l1 = 0.f;  /* rows g and g + 8 */
    /* the query index of rows g and g + 8 (rows past the tile's real ones clamp to a real one) */
    const int i0 = min(r0 + g, rows - 1) % seq_q, i1 = min(r0 + g + 8, rows - 1) % seq_q;
    const int wkey = warp * 16 * KW;  /* this warp's first key within a tile */
    int slot = 0;
    for (int e = e0; e < e1; ++e) {
#if BULK
        tr_mbar_wait(bars + 8 * slot, phase);  /* this tile's K and V have landed */
#if RAGGED || PAGE
        if ((e + 1) * BK > klen) tr_tma_zero_tail(sv + slot * KV_STAGE, klen - e * BK, tid);
#endif
        __syncthreads();  /* ... and every warp is done with the slot refilled next */
        if (warp == 0 && e + STAGES - 1 < e1) {
            const int ep = e + STAGES - 1, pslot = slot == 0 ? STAGES - 1 : slot - 1;
            tr_tma_tile(sk + pslot * KV_STAGE, sv + pslot * KV_STAGE, &tmk, &tmv, ep, klen, slab, kvh, tpg, pages,
                        bars + 8 * pslot, lane);
            if (ep + 1 < e1) tpg = tr_tma_page(table, ep + 1, klen, lane);  /* the next tile's pages, a tile early */
        }
#else
        TR_CP_WAIT(STAGES - 2);  /* this tile's K and V have landed */
        __syncthreads();         /* ... for every thread, and every warp is done with the slot refilled next */
        {
            const int ep = e + STAGES - 1, pslot = slot == 0 ? STAGES - 1 : slot - 1;
            if (ep < e1) {
                tr_dec_tile(sk + pslot * KV_STAGE, kg, ep, klen - ep * BK, tid, table, pages, kv_stride, pg);
                tr_dec_tile(sv + pslot * KV_STAGE, vg, ep, klen - ep * BK, tid, table, pages, kv_stride, pg);
            }
            TR_CP_COMMIT();
            if (ep + 1 < e1) tr_dec_pages(pg, table, ep + 1, klen, tid);  /* the next fill's pages, a tile early */
        }
#endif
        const uint32_t ks = sk + slot * KV_STAGE, vs = sv + slot * KV_STAGE;
        float s[2 * KW][4];
        #pragma unroll
        for (int j = 0; j < 2 * KW; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
        #pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
#if HD <= 128
            const uint32_t* a = qf[kk];
#else
            uint32_t a[4];  /* over head dim 128, O takes the registers Q would: Q re-read at each step */
            tr_ldm4(a, qa + kk * 32);
#endif
            #pragma unroll
            for (int j = 0; j < KW; ++j) {
                uint32_t bb[4];
                tr_ldm4(bb, TR_KV(ks, wkey + j * 16 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1)));
                tr_mma(s[2 * j], a, bb);
                tr_mma(s[2 * j + 1], a, bb + 2);
            }
        }
        if (MASKED || (e + 1) * BK > klen) {  /* the element test: past the entry's keys, outside the band */
            #pragma unroll
            for (int j = 0; j < 2 * KW; ++j) {
                #pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int col = e * BK + wkey + j * 8 + qd * 2 + (c & 1);
                    const int d = col - (c < 2 ? i0 : i1) - kdiag;
                    if (!(col < klen && d >= -win_left && d <= win_right)) s[j][c] = TR_NEG_INF;
                }
            }
        }
        uint32_t p[KW][4];
        {
            float x0 = mx0, x1 = mx1;
            #pragma unroll
            for (int j = 0; j < 2 * KW; ++j) {
                x0 = fmaxf(x0, fmaxf(s[j][0], s[j][1]));
                x1 = fmaxf(x1, fmaxf(s[j][2], s[j][3]));
            }
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
            const float ms0 = x0 == TR_NEG_INF ? 0.f : x0 * scale_log2;  /* nothing kept yet: 2^-inf = 0, no NaN */
            const float ms1 = x1 == TR_NEG_INF ? 0.f : x1 * scale_log2;
            const float al0 = tr_dex2(mx0 * scale_log2 - ms0), al1 = tr_dex2(mx1 * scale_log2 - ms1);
            mx0 = x0;
            mx1 = x1;
            l0 *= al0;
            l1 *= al1;
            #pragma unroll
            for (int t = 0; t < HD / 8; ++t) {  /* (skipping this where no max grew measured the same) */
                o[t][0] *= al0;
                o[t][1] *= al0;
                o[t][2] *= al1;
                o[t][3] *= al1;
            }
            #pragma unroll
            for (int j = 0; j < 2 * KW; ++j) {
                const float p0 = tr_dex2(fmaf(s[j][0], scale_log2, -ms0));
                const float p1 = tr_dex2(fmaf(s[j][1], scale_log2, -ms0));
                const float p2 = tr_dex2(fmaf(s[j][2], scale_log2, -ms1));
                const float p3 = tr_dex2(fmaf(s[j][3], scale_log2, -ms1));
                l0 += p0 + p1;
                l1 += p2 + p3;
                p[j >> 1][(j & 1) * 2] = tr_pack2(p0, p1);
                p[j >> 1][(j & 1) * 2 + 1] = tr_pack2(p2, p3);
            }
        }
        #pragma unroll
        for (int kk = 0; kk < KW; ++kk) {
            #pragma unroll
            for (int t = 0; t < HD / 16; ++t) {
                uint32_t bb[4];
                tr_ldm4t(bb, TR_KV(vs, wkey + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, t * 2 + (lane >> 4)));
                tr_mma(o[2 * t], p[kk], bb);
                tr_mma(o[2 * t + 1], p[kk], bb + 2);
            }
        }
#if BULK
        phase ^= slot == STAGES - 1;
#endif
        slot = slot == STAGES - 1 ? 0 : slot + 1;
    }
    TR_CP_WAIT(0);
    __syncthreads();  /* the ring is free: the warps' partials go where K and V were */
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float* const wo = reinterpret_cast<float*>(tr_part);  /* [WARPS][16][HD] */
    float* const wm = wo + WARPS * 16 * HD;                            /* [WARPS][16] maxima */
    float* const wl = wm + WARPS * 16;                                 /* [WARPS][16] sums */
    #pragma unroll
    for (int t = 0; t < HD / 8; ++t) {
        const int col = t * 8 + qd * 2;
        wo[(warp * 16 + g) * HD + col] = o[t][0];
        wo[(warp * 16 + g) * HD + col + 1] = o[t][1];
        wo[(warp * 16 + g + 8) * HD + col] = o[t][2];
        wo[(warp * 16 + g + 8) * HD + col + 1] = o[t][3];
    }
    if (qd == 0) {
        wm[warp * 16 + g] = mx0;
        wm[warp * 16 + g + 8] = mx1;
        wl[warp * 16 + g] = l0;
        wl[warp * 16 + g + 8] = l1;
    }
    __syncthreads();
"""

def kernel_source(r: CudaRenderer, name: str, dtype: str, *, head_dim: int, bk: int, warps: int, stages: int,
                  splits: int, masked: bool, counters: int, ragged: bool = False, page: int = 0,
                  adapt: tuple[int, int, int] | None = None, bulk: bool = False) -> str:
    """The device code after the prelude. ``counters``: the floats the row tiles' counters take at the
    workspace's start (the parked slices follow); ``ragged``: lengths from ``seq_lens``; ``page``: keys a
    page of a paged pool (0: contiguous K and V); ``adapt``: (full, min tiles, slice tiles) of the slice rule
    made at run time from the lengths (``splits`` is then the most slices an entry takes); ``bulk``: K and V by
    TMA (attention_decode_tma.py; the prelude then holds the Hopper library and the 3-d TMA load)."""
    head = HEAD
    full, min_tiles, slice_tiles = adapt or (splits, 1, 1)
    for key, value in (("__BK__", bk), ("__HD__", head_dim), ("__STAGES__", stages), ("__WARPS__", warps),
                       ("__SPLITS__", splits), ("__MASKED__", int(masked)), ("__RAGGED__", int(ragged)),
                       ("__PAGE__", page), ("__ADAPT__", int(adapt is not None)), ("__FULL__", full),
                       ("__MIN_TILES__", min_tiles), ("__SLICE_TILES__", slice_tiles), ("__BULK__", int(bulk)),
                       ("__TMAPS__", ",\n    const __grid_constant__ TrTensorMap tmk, const __grid_constant__ TrTensorMap tmv"
                        if bulk else ""), ("__TMA_DEVICE__", TMA_DEVICE), ("__NAME__", name)):
        head = head.replace(key, str(value))
    body = head + tail(r, splits, counters)
    return body.replace("tr_from_float", r.converters(dtype)[1])
