"""The C of the CPU's scaled 8-bit GEMM (``scaled_gemm.py`` says what it computes and how): the tiles (AVX-512 VNNI,
portable C), the table of tile sizes, and the driver (threads, K chunks, row sums, the scaling epilogue).

Integer sums are kept in wrapping 32-bit arithmetic (``vpdpbusd`` wraps; the scalar parts use ``uint32_t``): with B
flipped to unsigned a sum can pass 2^31 before its A-row correction comes off, and the result, which the op keeps
within int32 (k <= 131071), is exact modulo 2^32.
"""

from __future__ import annotations

# Tiles of R rows of A x C rows of B. Integer tiles write the R x C raw sums to res[r * NR + c]; block tiles the
# scaled fp32 sums. VNNI's are generated one per size (``tile_table``); the portable ones are loops.
TILE_VNNI_C = r"""
/* acc += u (unsigned bytes) . s (signed bytes), four products a lane. In assembly: written with the intrinsic,
   GCC 12 copies and spills a 4 x 5 tile's accumulators every step; an in-place operand keeps them in registers. */
#define TR_DPBUSD(acc, u, s) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s))
static inline __attribute__((always_inline)) __m128i tr_sum4(__m512i a, __m512i b, __m512i c, __m512i d) {
    /* the lane sums of four vectors: [sum a, sum b, sum c, sum d] */
    const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    const __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

"""

TILE_PORTABLE_C = r"""
static inline void tr_tile(const int R, const int C, const int8_t* restrict a, long lda, const int8_t* restrict b,
        long ldb, long kk, int32_t* restrict res) {
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            const int8_t* x = a + r * lda;
            const int8_t* y = b + c * ldb;
            int32_t s = 0;
            for (long p = 0; p < kk; ++p) s += (int32_t)x[p] * (int32_t)y[p];
            res[r * NR + c] = s;
        }
}

static inline void tr_btile(const int R, const int C, const int8_t* restrict a, long lda, const int8_t* restrict b,
        long ldb, long kk, const float* restrict sa, long sas, const float* restrict sb, long sbs,
        const long* restrict cb, const uint32_t* restrict rs, long rss, float* restrict res) {
    (void)rs; (void)rss;  /* nothing flipped, nothing to give back */
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            float f = 0.0f;
            for (long q = 0; q * 128 < kk; ++q) {
                const int8_t* x = a + r * lda + q * 128;
                const int8_t* y = b + c * ldb + q * 128;
                int32_t s = 0;
                for (long p = 0; p < 128; ++p) s += (int32_t)x[p] * (int32_t)y[p];
                f += (float)s * (sa[r * sas + q] * sb[q * sbs + cb[c]]);
            }
            res[r * NR + c] = f;
        }
}
"""


def _vnni_step(r_n: int, c_n: int, load: str, ind: str) -> list[str]:
    """One 64-byte step of K: C rows of B loaded and flipped, then each row of A against them."""
    out = [f"{ind}{{"]
    out += [f"{ind}    const __m512i b{c} = _mm512_xor_si512({load.format(q=f'b + {c} * ldb + p')}, flip);"
            for c in range(c_n)]
    for r in range(r_n):
        out.append(f"{ind}    {{ const __m512i a{r} = {load.format(q=f'a + {r} * lda + p')}; "
                   + " ".join(f"TR_DPBUSD(c{r}_{c}, b{c}, a{r});" for c in range(c_n)) + " }")
    out.append(f"{ind}}}")
    return out


LOAD = "_mm512_loadu_si512((const void*)({q}))"
LOAD_MASKED = "_mm512_maskz_loadu_epi8(mask, (const void*)({q}))"


def _zero(r_n: int, c_n: int, kind: str = "__m512i", zero: str = "_mm512_setzero_si512()", name: str = "c") -> list[str]:
    return [f"    {kind} " + ", ".join(f"{name}{r}_{c} = {zero}" for c in range(c_n)) + ";" for r in range(r_n)]


def vnni_tile(r_n: int, c_n: int) -> str:
    """The R x C integer tile with named accumulators (arrays of vectors leave GCC spilling them)."""
    lines = [f"static void tr_t{r_n}_{c_n}(const int8_t* restrict a, long lda, const int8_t* restrict b, long ldb, "
             "long kk, int32_t* restrict res) {", *_zero(r_n, c_n),
             "    const __m512i flip = _mm512_set1_epi8((char)0x80);", "    long p = 0;",
             "    for (; p + 64 <= kk; p += 64)", *_vnni_step(r_n, c_n, LOAD, "    "),
             "    if (p < kk) {",
             "        const __mmask64 mask = _cvtu64_mask64(~0ULL >> (64 - (kk - p)));  /* past K: A reads 0 */",
             *_vnni_step(r_n, c_n, LOAD_MASKED, "        "), "    }"]
    for r in range(r_n):
        c = 0
        while c + 4 <= c_n:
            lines.append(f"    _mm_storeu_si128((__m128i*)(res + {r} * NR + {c}), tr_sum4(c{r}_{c}, c{r}_{c + 1}, "
                         f"c{r}_{c + 2}, c{r}_{c + 3}));")
            c += 4
        lines += [f"    res[{r} * NR + {j}] = _mm512_reduce_add_epi32(c{r}_{j});" for j in range(c, c_n)]
    return "\n".join([*lines, "}"])


def vnni_block_tile(r_n: int, c_n: int) -> str:
    """block128's R x C tile: per 128-deep block, the int32 sums less FLIP x the A block's sum (in lane 0), to
    fp32, times the block's two scales, into fp32 accumulators."""
    lines = [f"static void tr_t{r_n}_{c_n}(const int8_t* restrict a, long lda, const int8_t* restrict b, long ldb, "
             "long kk, const float* restrict sa, long sas, const float* restrict sb, long sbs, const long* restrict cb, "
             "const uint32_t* restrict rs, long rss, float* restrict res) {",
             *_zero(r_n, c_n, "__m512", "_mm512_setzero_ps()", "f"),
             "    const __m512i flip = _mm512_set1_epi8((char)0x80);",
             "    for (long q = 0; q * 128 < kk; ++q) {", *["    " + z for z in _zero(r_n, c_n)],
             "        for (long p = q * 128; p < q * 128 + 128; p += 64)", *_vnni_step(r_n, c_n, LOAD, "        ")]
    for r in range(r_n):
        lines += [f"        {{ const __m512i comp = _mm512_set1_epi32((int)rs[{r} * rss + q]); "
                  f"const float s = sa[{r} * sas + q];"]
        lines += [f"          f{r}_{c} = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mask_sub_epi32(c{r}_{c}, 1, c{r}_{c}, "
                  f"comp)), _mm512_set1_ps(s * sb[q * sbs + cb[{c}]]), f{r}_{c});" for c in range(c_n)]
        lines.append("        }")
    lines.append("    }")
    lines += [f"    res[{r} * NR + {c}] = _mm512_reduce_add_ps(f{r}_{c});" for r in range(r_n) for c in range(c_n)]
    return "\n".join([*lines, "}"])


TILE_AVX2_C = r"""
static inline int32_t tr_hsum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
"""


def avx2_tile(r_n: int, c_n: int) -> str:
    """The R x C integer tile without VNNI: 16 bytes of K a step, both operands widened to 16 bits and multiplied
    in pairs into 32-bit lanes (``vpmaddwd``: exact, where ``vpmaddubsw``'s 16-bit sums saturate at int8's extremes),
    the last K % 16 in scalar code."""
    load = "_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)({q})))"
    lines = [f"static void tr_t{r_n}_{c_n}(const int8_t* restrict a, long lda, const int8_t* restrict b, long ldb, "
             "long kk, int32_t* restrict res) {",
             *_zero(r_n, c_n, "__m256i", "_mm256_setzero_si256()"), "    long p = 0;",
             "    for (; p + 16 <= kk; p += 16) {"]
    lines += [f"        const __m256i b{c} = {load.format(q=f'b + {c} * ldb + p')};" for c in range(c_n)]
    for r in range(r_n):
        lines.append(f"        {{ const __m256i a{r} = {load.format(q=f'a + {r} * lda + p')}; "
                     + " ".join(f"c{r}_{c} = _mm256_add_epi32(c{r}_{c}, _mm256_madd_epi16(a{r}, b{c}));"
                                for c in range(c_n)) + " }")
    lines.append("    }")
    lines += [f"    res[{r} * NR + {c}] = tr_hsum8(c{r}_{c});" for r in range(r_n) for c in range(c_n)]
    lines += ["    for (; p < kk; ++p) {"]
    lines += [f"        res[{r} * NR + {c}] += (int32_t)a[{r} * lda + p] * (int32_t)b[{c} * ldb + p];"
              for r in range(r_n) for c in range(c_n)]
    return "\n".join([*lines, "    }", "}"])


def tile_table(mr: int, nr: int, block: bool, kind_of: str) -> str:
    """One function per tile size (R <= mr rows, C <= nr columns: the edges' smaller tiles) and their table:
    ``kind_of`` "vnni" writes each out (``vnni_tile``), "avx2" the integer ones (``avx2_tile``; block scales take the
    portable loops), "portable" calls the portable loops with R and C as constants."""
    if block:
        sig = ("const int8_t* a, long lda, const int8_t* b, long ldb, long kk, const float* sa, long sas, "
               "const float* sb, long sbs, const long* cb, const uint32_t* rs, long rss, float* res")
        call = "tr_btile({r}, {c}, a, lda, b, ldb, kk, sa, sas, sb, sbs, cb, rs, rss, res)"
        kind = "tr_btile_fn"
    else:
        sig = "const int8_t* a, long lda, const int8_t* b, long ldb, long kk, int32_t* res"
        call = "tr_tile({r}, {c}, a, lda, b, ldb, kk, res)"
        kind = "tr_tile_fn"
    lines = [f"typedef void (*{kind})({sig});"]
    for r in range(1, mr + 1):
        for c in range(1, nr + 1):
            if kind_of == "vnni":
                lines.append(vnni_block_tile(r, c) if block else vnni_tile(r, c))
            elif kind_of == "avx2" and not block:
                lines.append(avx2_tile(r, c))
            else:
                lines.append(f"static void tr_t{r}_{c}({sig}) {{ {call.format(r=r, c=c)}; }}")
    rows = ", ".join("{" + ", ".join(f"tr_t{r}_{c}" for c in range(1, nr + 1)) + "}" for r in range(1, mr + 1))
    lines.append(f"static const {kind} TR_TILES[MR][NR] = {{{rows}}};")
    return "\n".join(lines)


DRIVER_C = r"""
typedef struct {
    long m, n, k, kbs, nbs;          /* kbs: K blocks of 128 (block scales), else 1; nbs: N blocks of 128 */
    const int8_t* a;
    const int8_t* b;                 /* n x k: the caller's (col layout) or bt */
    const int8_t* braw;              /* the caller's B */
    int8_t* bt;                      /* row layout: B transposed, n x k */
    const float* sa;
    const float* sb;
    void* out;
    const void* bias;                /* the fused epilogue's operands (C's type) and factor */
    const void* resid;
    float alpha;
    uint32_t* part;                  /* K in several chunks: the running sums, m x n (fp32 bits for block scales) */
    uint32_t* rs;                    /* FLIP x each A row's sum (block scales: each row's per block), wrapping */
    uint8_t* bp;                     /* packed form: B's panels */
    const int8_t* apad;              /* packed form: A, or its copy padded to a multiple of 4 bytes a row */
    long lda;                        /* apad's row stride */
    int nth;
    tr_barrier bar;
} tr_job;

static tr_buf tr_bt_buf, tr_rs_buf, tr_part_buf;

/* element (i, j) of C: the fused epilogue (TR_EPILOGUE, the op's chain) on the scaled value, then stored */
static inline void tr_put(const tr_job* J, long i, long j, float v) {
    const long at = i * J->n + j;
    TR_EPILOGUE
#if OUT_KIND == 0
    ((float*)J->out)[at] = v;
#elif OUT_KIND == 1
    ((uint16_t*)J->out)[at] = tr_f2bf(v);
#elif OUT_KIND == 2
    ((uint16_t*)J->out)[at] = tr_f2h(v);
#else
    (void)J; (void)at; (void)v; (void)i; (void)j;
#endif
}

/* one finished integer sum (the A-row correction off) -> the output */
static inline void tr_final(const tr_job* J, long i, long j, uint32_t sum) {
    const int32_t v = (int32_t)(sum - J->rs[i]);
#if OUT_KIND == 3
    ((int32_t*)J->out)[i * J->n + j] = v;
#elif SCALE_MODE == 1  /* the sum times each scale in turn: sa * sb alone can underflow where the result does not */
    tr_put(J, i, j, (float)v * J->sa[0] * J->sb[0]);
#elif SCALE_MODE == 2
    tr_put(J, i, j, (float)v * J->sa[i] * J->sb[j]);
#endif
}

static void tr_finish(const tr_job* J, long i, long j, int R, int C, const int32_t* res, int first, int last) {
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            const long at = (i + r) * J->n + j + c;
            uint32_t s = (uint32_t)res[r * NR + c];
            if (!first) s += J->part[at];
            if (last) tr_final(J, i + r, j + c, s);
            else J->part[at] = s;
        }
}

static void tr_finish_block(const tr_job* J, long i, long j, int R, int C, const float* res, int first, int last) {
    float* part = (float*)J->part;
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) {
            const long at = (i + r) * J->n + j + c;
            float s = res[r * NR + c];
            if (!first) s += part[at];
            if (last) tr_put(J, i + r, j + c, s);
            else part[at] = s;
        }
}

/* B (k x n, row layout) -> bt (n x k) for columns [n0, n1), in 64 x 64 blocks */
static void tr_transpose(tr_job* J, long n0, long n1) {
    for (long j0 = n0; j0 < n1; j0 += 64)
        for (long p0 = 0; p0 < J->k; p0 += 64) {
            const long j1 = tr_min(n1, j0 + 64), p1 = tr_min(J->k, p0 + 64);
            for (long p = p0; p < p1; ++p)
                for (long j = j0; j < j1; ++j) J->bt[j * J->k + p] = J->braw[p * J->n + j];
        }
}

/* rows [i0, i1): FLIP x the sum of each row of A (block scales: of each 128-wide block of it) */
static void tr_row_sums(tr_job* J, long i0, long i1) {
    const long w = J->k / J->kbs;
    for (long i = i0; i < i1; ++i)
        for (long q = 0; q < J->kbs; ++q) {
            const int8_t* x = J->a + i * J->k + q * w;
            int32_t s = 0;
            for (long p = 0; p < w; ++p) s += x[p];
            J->rs[i * J->kbs + q] = (uint32_t)FLIP * (uint32_t)s;
        }
}

#if !PACKED
static void tr_work(void* arg, int tid, int nth) {
    tr_job* J = (tr_job*)arg;
    const long per = tr_cdiv(tr_cdiv(J->n, NR), nth) * NR;
    const long n0 = tid * per, n1 = tr_min(J->n, n0 + per);
    const long rows = tr_cdiv(J->m, nth);
    tr_row_sums(J, tr_min(J->m, tid * rows), tr_min(J->m, (tid + 1) * rows));
#if !B_COL
    if (n0 < n1) tr_transpose(J, n0, n1);  /* this thread's columns only: no other thread reads them */
#endif
    if (nth > 1) { int sense = 0; tr_barrier_wait(&J->bar, &sense); }  /* every row sum is in */
    for (long k0 = 0; k0 < J->k; k0 += KC) {
        const long kk = tr_min(KC, J->k - k0);
        const int first = k0 == 0, last = k0 + kk == J->k;
        for (long m0 = 0; m0 < J->m; m0 += MC) {
            const long m1 = tr_min(J->m, m0 + MC);
            for (long j = n0; j < n1; j += NR) {
                const int C = (int)tr_min(NR, n1 - j);
                for (long i = m0; i < m1; i += MR) {
                    const int R = (int)tr_min(MR, m1 - i);
#if SCALE_MODE == 3
                    float res[MR * NR];
                    long cb[NR];
                    for (int c = 0; c < C; ++c) cb[c] = (j + c) / 128;
                    TR_TILES[R - 1][C - 1](J->a + i * J->k + k0, J->k, J->b + j * J->k + k0, J->k, kk,
                                           J->sa + i * J->kbs + k0 / 128, J->kbs, J->sb + (k0 / 128) * J->nbs, J->nbs,
                                           cb, J->rs + i * J->kbs + k0 / 128, J->kbs, res);
                    tr_finish_block(J, i, j, R, C, res, first, last);
#else
                    int32_t res[MR * NR];
                    TR_TILES[R - 1][C - 1](J->a + i * J->k + k0, J->k, J->b + j * J->k + k0, J->k, kk, res);
                    tr_finish(J, i, j, R, C, res, first, last);
#endif
                }
            }
        }
    }
}

#endif

/* packed form, K not a multiple of 4: rows [i0, i1) of A copied to apad, zero past K */
static void tr_pad_rows(tr_job* J, long i0, long i1) {
    for (long i = i0; i < i1; ++i) {
        memcpy((int8_t*)J->apad + i * J->lda, J->a + i * J->k, (size_t)J->k);
        memset((int8_t*)J->apad + i * J->lda + J->k, 0, (size_t)(J->lda - J->k));
    }
}

@PACKED@
static int tr_scaled_gemm(void* const* bufs, const int64_t* dims, const double* fparams) {
    tr_job J;
    memset(&J, 0, sizeof J);
    J.m = (long)dims[0]; J.n = (long)dims[1]; J.k = (long)dims[2];
    J.kbs = SCALE_MODE == 3 ? J.k / 128 : 1;
    J.nbs = tr_cdiv(J.n, 128);
    J.a = (const int8_t*)bufs[0]; J.braw = (const int8_t*)bufs[1];
    J.sa = (const float*)bufs[2]; J.sb = (const float*)bufs[3]; J.out = bufs[4];
    J.bias = bufs[5]; J.resid = bufs[6]; J.alpha = (float)fparams[0];
    int t = dims[3] > 0 ? (int)dims[3] : NTHREADS;
    const long tiles = tr_cdiv(J.n, NR);
    if ((long)t > tiles) t = (int)tiles;
    if (t < 1) t = 1;
    pthread_mutex_lock(&tr_call_mu);
    J.rs = (uint32_t*)tr_reserve(&tr_rs_buf, sizeof(uint32_t) * (size_t)(J.m * J.kbs));
    J.b = J.braw;
#if PACKED
    const long kp = (J.k + KALIGN - 1) & ~(KALIGN - 1L);  /* the packed form's K: whole words (AMX: 64 bytes) */
    /* every panel, or (few rows: packed as used) a K chunk of one a thread */
    const size_t whole = (size_t)(tr_cdiv(J.n, NR) * NR * kp), chunks = (size_t)t * NR * KC;
    J.bp = (uint8_t*)tr_reserve(&tr_bp_buf, whole > chunks ? whole : chunks);
    J.lda = kp;
    J.apad = J.k % KALIGN ? (const int8_t*)tr_reserve(&tr_apad_buf, (size_t)(J.m * kp)) : J.a;
    if (J.bp == NULL) J.b = NULL;
#else
    const long kp = J.k;
#if !B_COL
    J.bt = (int8_t*)tr_reserve(&tr_bt_buf, (size_t)(J.n * J.k));
    J.b = J.bt;
#endif
#endif
    J.part = kp > KC ? (uint32_t*)tr_reserve(&tr_part_buf, sizeof(uint32_t) * (size_t)(J.m * J.n)) : NULL;
    if (J.rs == NULL || J.b == NULL || (kp > KC && J.part == NULL) || (PACKED && J.apad == NULL)) {
        pthread_mutex_unlock(&tr_call_mu);
        return 1;
    }
#if AMX
    tr_amx_permit();  /* the OS's AMX tile state, asked once (else the VNNI tiles run) */
#endif
    t = tr_pool_ensure(t);
    J.nth = t;
    if (t > 1) tr_barrier_init(&J.bar, t);
#if PACKED
    tr_parallel(tr_work_packed, &J, t);
#else
    tr_parallel(tr_work, &J, t);
#endif
    if (t > 1) tr_barrier_destroy(&J.bar);
    pthread_mutex_unlock(&tr_call_mu);
    return 0;
}
"""
