"""The swapped AMX form of the CPU's scaled 8-bit GEMM (a schedule's ``swap``; AMX-INT8 hosts, B given n x k, "col"):
C^T = B A^T, the weights AMX's A operand and the activations its B operand, so the weights are never packed.

A tile is 32 rows of B (n) x 32 rows of A (m): two tiles of the weights (16 rows x 64 bytes of K, read in place at
B's row stride: the caller's n x k, as ``nn.Linear`` keeps it), two tiles of the activations and four int32 C^T
tiles, multiplied by ``tdpbssd``: signed bytes by signed bytes, so neither side is flipped to unsigned and no row
sum gives a flip back (the packed form's ``tdpbsud`` needs its 128 x A-row-sum; this needs none: J->rs is zeros).
The activations are packed a call into AMX's B layout, panels of 32 rows of A: word (q, c) at q * 128 + 4 c holds
A[32 p + c][4q .. 4q + 3], zero past K (padded to 64 bytes) and M: M x K bytes, each thread its own panels, then a
barrier. K's last 64-byte step, where K is not a multiple of 64, reads the weights through a copy of the tile's rows
padded with zeros (never past a row, nor past B's end). A C^T tile (n rows x m columns) is stored, transposed in
registers (``tr_t16``) and handed to the packed form's finish (``tr_finish_packed``: scales, epilogue, C's type,
the running sums of K chunks) as m rows x n columns.

Threads split N (whole 32-row tiles of the weights); within a thread, for each K chunk of ``kc`` bytes and block of
``mc`` rows of A (its packed panels kept in L2), each weight tile meets every 32 rows of the block. Tiles are
configured when a tile's weight rows differ from the last one's (N's edge), released after the call. Where the OS
refuses AMX, or ``TRACEA_NO_AMX`` is set, the call runs the AMX form's own driver instead (``tr_scaled_gemm``: the
weights packed and flipped, the VNNI 12-row tiles), so the answer is the same and only slower.
"""

from __future__ import annotations

SWAPPED_C = r"""
/* rows [32 pm, 32 pm + 32) of A as AMX's B operand, K to kp (a multiple of 64): 16 rows x 64 bytes of K loaded,
   transposed as 16 x 16 words; zero past K and M */
static void tr_swap_pack(const tr_job* J, long pm, long kp, uint8_t* restrict dst) {
    for (long v = 0; v < 2; ++v) {
        const long i0 = pm * 32 + v * 16;
        for (long k0 = 0; k0 < kp; k0 += 64) {
            const long nb = tr_min(64, J->k - k0);  /* >= 1: kp is K rounded up to 64 */
            const __mmask64 m = _cvtu64_mask64(nb >= 64 ? ~0ULL : ~0ULL >> (64 - nb));
            __m512i r[16];
            for (int c = 0; c < 16; ++c)
                r[c] = i0 + c < J->m ? _mm512_maskz_loadu_epi8(m, J->a + (i0 + c) * J->k + k0) : _mm512_setzero_si512();
            if (i0 < J->m) tr_t16(r);
            for (long q = 0; q < 16; ++q) _mm512_storeu_si512((void*)(dst + (k0 / 4 + q) * 128 + v * 64), r[q]);
        }
    }
}

/* The tiles as the AMX form configures them (tr_amx_config, scaled_gemm_amx_c.py, always beside this form): tmm0,
   tmm1: C^T's weight rows 0-15 (activation columns 0-15, 16-31); tmm2, tmm3: its rows 16-31; tmm4, tmm5: the
   weights' two 16-row groups; tmm6, tmm7: the activations' two 16-column groups (16 words of K) */

/* R (<= 32) weight rows at w (stride ld) x C (<= 32) packed activation columns at ap over nw 64-byte steps of K,
   then (tail) one step from wt (the padded copy, stride 64): C^T's int32 sums to ct[n * 32 + m] */
TR_AMX_FN static void tr_swap_tile(int R, int C, const int8_t* w, long ld, long nw, const int8_t* wt, int tail,
                                   const uint8_t* ap, int32_t* ct, int* rows) {
    if (R != *rows) { tr_amx_config(R); *rows = R; }  /* (zeroes every tile) */
    else {
        _tile_zero(0);
        _tile_zero(1);
        if (R > 16) { _tile_zero(2); _tile_zero(3); }
    }
    const int two_r = R > 16, two_c = C > 16;
    for (long s = 0; s < nw + tail; ++s) {
        const int8_t* wp = s < nw ? w + s * 64 : wt;
        const long lw = s < nw ? ld : 64;
        const uint8_t* as = ap + s * 2048;
        _tile_loadd(4, wp, lw);
        _tile_loadd(6, as, 128);
        _tile_dpbssd(0, 4, 6);
        if (two_c) { _tile_loadd(7, as + 64, 128); _tile_dpbssd(1, 4, 7); }
        if (two_r) {
            _tile_loadd(5, wp + 16 * lw, lw);
            _tile_dpbssd(2, 5, 6);
            if (two_c) _tile_dpbssd(3, 5, 7);
        }
    }
    _tile_stored(0, ct, 128);
    if (two_c) _tile_stored(1, ct + 16, 128);
    if (two_r) {
        _tile_stored(2, ct + 16 * 32, 128);
        if (two_c) _tile_stored(3, ct + 16 * 32 + 16, 128);
    }
}

/* ct (n rows x m columns, the 16 x 16 blocks the tile filled) -> res (m rows x n columns, stride NR) */
static void tr_swap_transpose(const int32_t* ct, int R, int C, int32_t* res) {
    for (int nb = 0; nb < R; nb += 16)
        for (int mb = 0; mb < C; mb += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512((const void*)(ct + (nb + i) * 32 + mb));
            tr_t16(r);
            for (int i = 0; i < 16; ++i) _mm512_store_si512((void*)(res + (mb + i) * NR + nb), r[i]);
        }
}

/* the tile's K tail: nb (< 64) bytes of R weight rows at w (stride ldw) -> wt (stride 64, zero past nb) */
static void tr_swap_tail(const int8_t* w, long ldw, int R, long nb, int8_t* restrict wt) {
    const __mmask64 m = _cvtu64_mask64(~0ULL >> (64 - nb));
    for (int r = 0; r < R; ++r) _mm512_store_si512((void*)(wt + r * 64), _mm512_maskz_loadu_epi8(m, w + r * ldw));
}

/* this thread's 32-row weight tiles; K in chunks of KC, A in blocks of MC rows */
static void tr_work_swapped(void* arg, int tid, int nth) {
    tr_job* J = (tr_job*)arg;
    const long kp = (J->k + 63) & ~63L, mpan = tr_cdiv(J->m, 32), mper = tr_cdiv(mpan, nth);
    for (long pm = tid * mper; pm < tr_min(mpan, (tid + 1) * mper); ++pm) tr_swap_pack(J, pm, kp, J->bp + pm * 32 * kp);
    if (nth > 1) { int sense = 0; tr_barrier_wait(&J->bar, &sense); }  /* every panel of A is in */
    const long tiles = tr_cdiv(J->n, 32), per = tr_cdiv(tiles, nth), t0 = tid * per, t1 = tr_min(tiles, t0 + per);
    int32_t ct[32 * 32] __attribute__((aligned(64))), res[32 * NR] __attribute__((aligned(64)));
    int8_t wt[32 * 64] __attribute__((aligned(64)));
    int rows = -1;  /* the weight rows this thread's tiles are configured for (none yet) */
    for (long k0 = 0; k0 < kp; k0 += KC) {
        const long kk = tr_min(KC, kp - k0), kin = tr_min(kk, J->k - k0);
        const int first = k0 == 0, last = k0 + kk == kp, tail = kin % 64 != 0;
        for (long m0 = 0; m0 < J->m; m0 += MC) {
            const long m1 = tr_min(J->m, m0 + MC);
            for (long t = t0; t < t1; ++t) {
                const int R = (int)tr_min(32, J->n - t * 32);
                const int8_t* w = J->braw + t * 32 * J->k + k0;
                if (tail) tr_swap_tail(w + kin / 64 * 64, J->k, R, kin % 64, wt);
                for (long i = m0; i < m1; i += 32) {
                    const int C = (int)tr_min(32, m1 - i);
                    tr_swap_tile(R, C, w, J->k, kin / 64, wt, tail, J->bp + i * kp + k0 * 32, ct, &rows);
                    tr_swap_transpose(ct, R, C, res);
                    tr_finish_packed(J, i, t * 32, C, res, first, last);
                }
            }
        }
    }
    if (rows >= 0) tr_amx_release();
}

/* the swapped form's call: without the OS's AMX tile state (or with TRACEA_NO_AMX) the AMX form's own (VNNI tiles) */
static int tr_scaled_gemm_swapped(void* const* bufs, const int64_t* dims, const double* fparams) {
    pthread_mutex_lock(&tr_call_mu);
    tr_amx_permit();
    const int amx = tr_amx_ok;
    pthread_mutex_unlock(&tr_call_mu);
    if (!amx) return tr_scaled_gemm(bufs, dims, fparams);
    tr_job J;
    memset(&J, 0, sizeof J);
    J.m = (long)dims[0]; J.n = (long)dims[1]; J.k = (long)dims[2];
    J.kbs = 1; J.nbs = tr_cdiv(J.n, 128);
    J.a = (const int8_t*)bufs[0]; J.braw = J.b = (const int8_t*)bufs[1];
    J.sa = (const float*)bufs[2]; J.sb = (const float*)bufs[3]; J.out = bufs[4];
    J.bias = bufs[5]; J.resid = bufs[6]; J.alpha = (float)fparams[0];
    int t = dims[3] > 0 ? (int)dims[3] : NTHREADS;
    if ((long)t > tr_cdiv(J.n, 32)) t = (int)tr_cdiv(J.n, 32);
    if (t < 1) t = 1;
    const long kp = (J.k + 63) & ~63L;
    pthread_mutex_lock(&tr_call_mu);
    J.rs = (uint32_t*)tr_reserve(&tr_rs_buf, sizeof(uint32_t) * (size_t)J.m);  /* zeros: no flip to give back */
    J.bp = (uint8_t*)tr_reserve(&tr_bp_buf, (size_t)(tr_cdiv(J.m, 32) * 32 * kp));  /* A's panels */
    J.part = kp > KC ? (uint32_t*)tr_reserve(&tr_part_buf, sizeof(uint32_t) * (size_t)(J.m * J.n)) : NULL;
    if (J.rs == NULL || J.bp == NULL || (kp > KC && J.part == NULL)) {
        pthread_mutex_unlock(&tr_call_mu);
        return 1;
    }
    memset(J.rs, 0, sizeof(uint32_t) * (size_t)J.m);
    t = tr_pool_ensure(t);
    J.nth = t;
    if (t > 1) tr_barrier_init(&J.bar, t);
    tr_parallel(tr_work_swapped, &J, t);
    if (t > 1) tr_barrier_destroy(&J.bar);
    pthread_mutex_unlock(&tr_call_mu);
    return 0;
}
"""
