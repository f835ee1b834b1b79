"""The mma.sync attention kernel's CUDA source (issue 17): FlashAttention-2's forward on m16n8k16.

One block per (q tile, head, batch); ``blockIdx.x`` indexes the plan's ``order`` (stored after the CSR
pointers in ``tile_ptr``: ``tile_ptr[q_tiles + 1 + x]``), so the causal triangle's long tiles start first.
Each warp owns 16 query rows. Per visited k tile:

- S = Q K^T: Q's A fragments come from registers (loaded once by ldmatrix; past head dim 128 they would
  take 40-64 registers beside O's 72-128, so they are re-read from shared memory each step instead), K's B
  fragments by ldmatrix from a swizzled ring (16-byte chunk c of row r at chunk c ^ (r & 7): the 8 rows
  an ldmatrix phase reads hit 8 distinct bank groups, as do cp.async's 16-byte writes). The XOR needs rows
  of whole 128-byte groups (head dim a multiple of 64); any other multiple of 16 pads each row by 16 bytes
  instead (the decode kernel's layout): a pitch of an odd number of 16-byte chunks puts the 8 rows of an
  ldmatrix phase, and the epilogue's 8 rows of 4-byte stores, in 8 distinct bank groups;
- only partial tiles (``k_tile << 1 | 1``) test each element with ``tr_attn_keep``;
- online softmax in registers: a thread holds 2 rows (g and g + 8 of its warp's 16) over 2 columns of
  each n8 tile; the row max is reduced over the quad by two shuffles, exponentials are ex2.approx of
  s * scale_log2 - m * scale_log2 (one FMA), the row sums stay per thread until the end;
- P is packed to 16 bits in registers: the C fragment of two neighbouring n8 tiles is exactly the A
  fragment of one k16 step of P V, so P never leaves registers; V's B fragments by ldmatrix.trans.

K and V travel in separate cp.async groups (K0, V0, K1, V1, ...) through ``stages`` slots each: the wait
before S needs only K, the wait before P V only V, so V's load overlaps Q K^T and the softmax, and the
next K's load overlaps P V. Rows and keys past the end load as zeros (src-size 0) and are never stored.
O, divided by the row sums, is written through the warp's own rows of the Q tile so that global stores
are whole 16-byte chunks (a row's in consecutive lanes) rather than 4 bytes a lane.
"""

from __future__ import annotations

from .attention_plan import KEEP_FN

BODY = r"""
#define BQ __BQ__
#define BK __BK__
#define HD __HD__
#define HDP __HDP__  /* HD rounded up to 16 (the k step): columns HD.. of a tile are zeros */
#define STAGES __STAGES__
#define WM __WM__
#define NT (BQ / (16 * WM) * 32)
#define CH (HD / 8)
#define CHP (HDP / 8)
#define QREGS __QREGS__
#define TR_LN2 0.6931471805599453f

/* 2^x in one MUFU op (exp2f without fast math adds denormal scaling); 2^-inf = 0. */
static __device__ __forceinline__ float tr_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ void tr_sts32(uint32_t addr, uint32_t x) {
    asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(addr), "r"(x) : "memory");
}

/* 16 bytes from shared memory at src to global memory at dst. */
static __device__ __forceinline__ void tr_st_global16(void* dst, uint32_t src) {
    uint32_t a, b, c, d;
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(src) : "memory");
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" :: "l"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

__SWZ__
/* ROWS rows of HD elements from src into the swizzled tile at dst; rows >= valid and the padded columns
   (chunks CH.. of HDP) are zero-filled. */
template <int ROWS>
static __device__ __forceinline__ void tr_attn_fill(uint32_t dst, const uint16_t* __restrict__ src, int valid, int tid) {
    #pragma unroll
    for (int i = 0; i < (ROWS * CHP + NT - 1) / NT; ++i) {
        const int c = tid + i * NT;
        if ((ROWS * CHP) % NT == 0 || c < ROWS * CHP) {
            const int r = c / CHP, ch = c % CHP;
            const bool ok = r < valid && (CH == CHP || ch < CH);
            tr_cp16(dst + tr_swz(r, ch), src + (ok ? r * HD + ch * 8 : 0), ok ? 16u : 0u);
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT, 1) __NAME__(
    const uint16_t* __restrict__ q, const uint16_t* __restrict__ k, const uint16_t* __restrict__ v,
    uint16_t* __restrict__ out, float* __restrict__ lse, const int* __restrict__ tile_ptr,
    const int* __restrict__ tile_idx, const unsigned char* __restrict__ bmask, int batch, int heads,
    int kv_heads, int seq_q, int seq_k, int diag, int win_left, int win_right, int bm_cols, int bm_bq,
    int bm_bk, float scale_log2) {
    extern __shared__ __align__(128) unsigned char tr_smem[];
    constexpr uint32_t KV_STAGE = BK * __ROWB__;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, qd = lane & 3, wrow = warp * 16 * WM;
    const int q_tiles = (seq_q + BQ - 1) / BQ;
    const int tile = tile_ptr[q_tiles + 1 + blockIdx.x];
    const int h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (heads / kv_heads);
    const int row0 = tile * BQ;
    const size_t qoff = ((size_t)(b * heads + h) * seq_q + row0) * HD;
    const uint16_t* kg = k + (size_t)(b * kv_heads + kvh) * seq_k * HD;
    const uint16_t* vg = v + (size_t)(b * kv_heads + kvh) * seq_k * HD;
    const int e0 = tile_ptr[tile], e1 = tile_ptr[tile + 1];
    const uint32_t sq = tr_smem_addr(tr_smem);
    const uint32_t sk = sq + BQ * __ROWB__;
    const uint32_t sv = sk + STAGES * KV_STAGE;
    /* this lane's ldmatrix row address of Q (A operand, m16 tile mi adds 16 rows) */
    const int qlr = wrow + (lane & 7) + ((lane >> 3) & 1) * 8, qlc = lane >> 4;

    /* Groups: Q, then (K, V) per entry; the first STAGES - 1 entries in flight before the loop. */
    tr_attn_fill<BQ>(sq, q + qoff, seq_q - row0, tid);
    TR_CP_COMMIT();
    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int kt = e0 + s < e1 ? tile_idx[e0 + s] >> 1 : -1;
        if (kt >= 0) tr_attn_fill<BK>(sk + s * KV_STAGE, kg + (size_t)kt * BK * HD, seq_k - kt * BK, tid);
        TR_CP_COMMIT();
        if (kt >= 0) tr_attn_fill<BK>(sv + s * KV_STAGE, vg + (size_t)kt * BK * HD, seq_k - kt * BK, tid);
        TR_CP_COMMIT();
    }
    TR_CP_WAIT(2 * (STAGES - 1));
    __syncthreads();
#if QREGS
    uint32_t qf[HDP / 16][4];
    #pragma unroll
    for (int kk = 0; kk < HDP / 16; ++kk) tr_ldm4(qf[kk], sq + tr_swz(qlr, kk * 2 + qlc));
#endif
    float o[WM][HDP / 8][4];
    float mx[2 * WM], ls[2 * WM];  /* per m16 tile mi: rows g (2 mi) and g + 8 (2 mi + 1) */
    #pragma unroll
    for (int mi = 0; mi < WM; ++mi) {
        #pragma unroll
        for (int t = 0; t < HDP / 8; ++t) o[mi][t][0] = o[mi][t][1] = o[mi][t][2] = o[mi][t][3] = 0.f;
        mx[2 * mi] = mx[2 * mi + 1] = TR_NEG_INF;
        ls[2 * mi] = ls[2 * mi + 1] = 0.f;
    }
    int slot = 0;
    for (int e = e0; e < e1; ++e) {
        const int ent = tile_idx[e];
        const int kt = ent >> 1;
        const int ep = e + STAGES - 1;
        const int kp = ep < e1 ? tile_idx[ep] >> 1 : -1;
        const int pslot = slot == 0 ? STAGES - 1 : slot - 1;  /* (slot + STAGES - 1) % STAGES */
        TR_CP_WAIT(2 * STAGES - 3);  /* this entry's K has landed; its V and later entries may not have */
        __syncthreads();
        if (kp >= 0) tr_attn_fill<BK>(sk + pslot * KV_STAGE, kg + (size_t)kp * BK * HD, seq_k - kp * BK, tid);
        TR_CP_COMMIT();
        const uint32_t ks = sk + slot * KV_STAGE;
        float s[WM][BK / 8][4];
        #pragma unroll
        for (int mi = 0; mi < WM; ++mi) {
            #pragma unroll
            for (int j = 0; j < BK / 8; ++j) s[mi][j][0] = s[mi][j][1] = s[mi][j][2] = s[mi][j][3] = 0.f;
        }
        #pragma unroll
        for (int kk = 0; kk < HDP / 16; ++kk) {
#if QREGS
            const uint32_t (*a)[4] = &qf[kk];
#else
            uint32_t a[WM][4];
            #pragma unroll
            for (int mi = 0; mi < WM; ++mi) tr_ldm4(a[mi], sq + tr_swz(qlr + mi * 16, kk * 2 + qlc));
#endif
            #pragma unroll
            for (int j = 0; j < BK / 16; ++j) {
                uint32_t bb[4];
                tr_ldm4(bb, ks + tr_swz(j * 16 + (lane & 7) + (lane >> 4) * 8, kk * 2 + ((lane >> 3) & 1)));
                #pragma unroll
                for (int mi = 0; mi < WM; ++mi) {
                    tr_mma(s[mi][2 * j], a[mi], bb);
                    tr_mma(s[mi][2 * j + 1], a[mi], bb + 2);
                }
            }
        }
        if (ent & 1) {  /* a partial tile: the element test (rows past seq_q clamp to a valid mask row) */
            #pragma unroll
            for (int mi = 0; mi < WM; ++mi) {
                #pragma unroll
                for (int j = 0; j < BK / 8; ++j) {
                    #pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        const int i = min(row0 + wrow + mi * 16 + g + (c >> 1) * 8, seq_q - 1);
                        const int col = kt * BK + j * 8 + qd * 2 + (c & 1);
                        if (!tr_attn_keep(i, col, seq_k, diag, win_left, win_right, bmask, bm_cols, bm_bq, bm_bk))
                            s[mi][j][c] = TR_NEG_INF;
                    }
                }
            }
        }
        uint32_t p[WM][BK / 16][4];
        #pragma unroll
        for (int mi = 0; mi < WM; ++mi) {
            float x0 = mx[2 * mi], x1 = mx[2 * mi + 1];
            #pragma unroll
            for (int j = 0; j < BK / 8; ++j) {
                x0 = fmaxf(x0, fmaxf(s[mi][j][0], s[mi][j][1]));
                x1 = fmaxf(x1, fmaxf(s[mi][j][2], s[mi][j][3]));
            }
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
            x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
            x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
            /* A row with nothing kept yet keeps max -inf: subtract 0 instead, so 2^-inf gives 0, never NaN. */
            const float ms0 = x0 == TR_NEG_INF ? 0.f : x0 * scale_log2;
            const float ms1 = x1 == TR_NEG_INF ? 0.f : x1 * scale_log2;
            const float al0 = tr_ex2(mx[2 * mi] * scale_log2 - ms0), al1 = tr_ex2(mx[2 * mi + 1] * scale_log2 - ms1);
            mx[2 * mi] = x0;
            mx[2 * mi + 1] = x1;
            float l0 = ls[2 * mi] * al0, l1 = ls[2 * mi + 1] * al1;
            #pragma unroll
            for (int t = 0; t < HDP / 8; ++t) {
                o[mi][t][0] *= al0;
                o[mi][t][1] *= al0;
                o[mi][t][2] *= al1;
                o[mi][t][3] *= al1;
            }
            #pragma unroll
            for (int j = 0; j < BK / 8; ++j) {
                const float p0 = tr_ex2(fmaf(s[mi][j][0], scale_log2, -ms0));
                const float p1 = tr_ex2(fmaf(s[mi][j][1], scale_log2, -ms0));
                const float p2 = tr_ex2(fmaf(s[mi][j][2], scale_log2, -ms1));
                const float p3 = tr_ex2(fmaf(s[mi][j][3], scale_log2, -ms1));
                l0 += p0 + p1;
                l1 += p2 + p3;
                p[mi][j >> 1][(j & 1) * 2] = tr_pack2(p0, p1);
                p[mi][j >> 1][(j & 1) * 2 + 1] = tr_pack2(p2, p3);
            }
            ls[2 * mi] = l0;
            ls[2 * mi + 1] = l1;
        }
        TR_CP_WAIT(2 * STAGES - 3);  /* this entry's V has landed */
        __syncthreads();
        if (kp >= 0) tr_attn_fill<BK>(sv + pslot * KV_STAGE, vg + (size_t)kp * BK * HD, seq_k - kp * BK, tid);
        TR_CP_COMMIT();
        const uint32_t vs = sv + slot * KV_STAGE;
        #pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            #pragma unroll
            for (int t = 0; t < HDP / 16; ++t) {
                uint32_t bb[4];
                tr_ldm4t(bb, vs + tr_swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, t * 2 + (lane >> 4)));
                #pragma unroll
                for (int mi = 0; mi < WM; ++mi) {
                    tr_mma(o[mi][2 * t], p[mi][kk], bb);
                    tr_mma(o[mi][2 * t + 1], p[mi][kk], bb + 2);
                }
            }
        }
        slot = slot == STAGES - 1 ? 0 : slot + 1;
    }
    TR_CP_WAIT(0);
    __syncwarp();  /* O goes through this warp's own rows of the Q tile: no other warp reads them */
    #pragma unroll
    for (int mi = 0; mi < WM; ++mi) {
        #pragma unroll
        for (int hf = 0; hf < 2; ++hf) {  /* rows g and g + 8 of m16 tile mi */
            float l = ls[2 * mi + hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int rl = wrow + mi * 16 + hf * 8 + g;  /* the row within the tile */
            #pragma unroll
            for (int t = 0; t < HD / 8; ++t)
                tr_sts32(sq + tr_swz(rl, t) + qd * 4, tr_pack2(o[mi][t][2 * hf] * inv, o[mi][t][2 * hf + 1] * inv));
            if (qd == 0 && row0 + rl < seq_q)
                lse[(size_t)(b * heads + h) * seq_q + row0 + rl] =
                    l > 0.f ? (mx[2 * mi + hf] * scale_log2 + log2f(l)) * TR_LN2 : TR_NEG_INF;
        }
    }
    __syncwarp();
    #pragma unroll
    for (int i = 0; i < (16 * WM * CH + 31) / 32; ++i) {  /* whole 16-byte chunks, a row's in consecutive lanes */
        const int c = lane + 32 * i, rl = wrow + c / CH, ch = c % CH;
        if (((16 * WM * CH) % 32 == 0 || c < 16 * WM * CH) && row0 + rl < seq_q) tr_st_global16(out + qoff + (size_t)rl * HD + ch * 8, sq + tr_swz(rl, ch));
    }
}
"""


SWIZZLED = r"""/* Byte offset of 16-byte chunk ch of row r in a swizzled tile of HD-element rows. */
static __device__ __forceinline__ uint32_t tr_swz(int r, int ch) {
    return (uint32_t)(r * (HDP * 2) + ((ch ^ (r & 7)) << 4));
}
"""

PADDED = r"""/* Byte offset of 16-byte chunk ch of row r in a tile of HD-element rows, each padded by 16 bytes (the XOR
   swizzle needs rows of whole 128-byte groups): 8 rows at one chunk fall in 8 distinct bank groups. */
#define ROWB (HDP * 2 + 16)
static __device__ __forceinline__ uint32_t tr_swz(int r, int ch) {
    return (uint32_t)(r * ROWB + (ch << 4));
}
"""


def swizzled(head_dim: int) -> bool:
    """Rows of whole 128-byte groups take the XOR swizzle; other multiples of 16 the padded rows."""
    return head_dim % 64 == 0


def padded(head_dim: int) -> int:
    """The head dim the kernel computes over: a multiple of 8 rounded up to 16 (the m16n8k16 k step); the
    extra 8 columns of Q, K and V are zeros in shared memory (never read from global memory)."""
    return -(-head_dim // 16) * 16


def row_bytes(head_dim: int) -> int:
    """The shared-memory pitch of a Q, K or V row: the (padded) row itself, or 16 bytes more."""
    return 2 * padded(head_dim) + (0 if swizzled(head_dim) else 16)


def kernel_source(name: str, bq: int, bk: int, head_dim: int, stages: int, warp_rows: int,
                  q_in_registers: bool) -> str:
    """The device code after the prelude: the swizzle (or padded rows), the tile fill, the mask rule and the
    kernel."""
    body = BODY
    pad = not swizzled(head_dim)
    for key, value in (("__SWZ__", PADDED if pad else SWIZZLED), ("__ROWB__", "ROWB" if pad else "HDP * 2"),
                       ("__BQ__", bq), ("__BK__", bk), ("__HDP__", padded(head_dim)), ("__HD__", head_dim),
                       ("__STAGES__", stages),
                       ("__QREGS__", int(q_in_registers)), ("__WM__", warp_rows // 16), ("__NAME__", name)):
        body = body.replace(key, str(value))
    return KEEP_FN + body

