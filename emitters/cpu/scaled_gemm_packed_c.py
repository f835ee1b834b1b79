"""The packed form of the CPU's scaled 8-bit GEMM on AVX-512 VNNI (a schedule's ``pack``), for many rows of A: B is
packed once a call into panels of ``nr`` columns, four K bytes of a column to a 32-bit word and 16 columns to a
vector (``vpdpbusd``'s operand layout), flipped to unsigned as it is packed; a tile of ``mr`` rows x ``nr / 16``
vectors broadcasts four bytes of each A row (read in place: signed) against them, so every lane accumulates one
output and no lane sums are needed. Each output gives back 128 x its A row's sum, as in the dot form
(``scaled_gemm_c.py``, whose driver pieces, row sums and output rounding this reuses).

Each thread packs the panels of its own columns, so only the row sums wait for a barrier. A K not a multiple of 4
reads A through a copy padded with zeros (a broadcast reads four bytes); B's padding is zero after the flip. The AMX
form (``scaled_gemm_amx_c.py``) runs this driver with its own tile and K padded to 64 bytes (``KALIGN``).
"""

from __future__ import annotations


def packed_tile(r_n: int, nv: int) -> str:
    """R rows x ``nv`` vectors: K/4 steps of a broadcast A word against the panel's vectors; the int32 sums to
    res[r * NR + 16 v + lane]."""
    lines = [f"static void tr_p{r_n}(const int8_t* restrict a, long lda, const uint8_t* restrict bp, long k4n, "
             "int32_t* restrict res) {"]
    lines += ["    __m512i " + ", ".join(f"c{r}_{v} = _mm512_setzero_si512()" for v in range(nv)) + ";"
              for r in range(r_n)]
    lines += ["    for (long q = 0; q < k4n; ++q, bp += 4 * NR) {"]
    lines += [f"        const __m512i b{v} = _mm512_loadu_si512((const void*)(bp + {64 * v}));" for v in range(nv)]
    for r in range(r_n):
        lines.append(f"        {{ const __m512i a{r} = _mm512_set1_epi32(tr_ld32(a + {r} * lda + 4 * q)); "
                     + " ".join(f"TR_DPBUSD(c{r}_{v}, b{v}, a{r});" for v in range(nv)) + " }")
    lines.append("    }")
    lines += [f"    _mm512_storeu_si512((void*)(res + {r} * NR + {16 * v}), c{r}_{v});"
              for r in range(r_n) for v in range(nv)]
    return "\n".join([*lines, "}"])


def packed_table(mr: int, nr: int) -> str:
    """The packed tiles for 1..mr rows (the last rows of a block) and their table."""
    sig = "const int8_t* a, long lda, const uint8_t* bp, long k4n, int32_t* res"
    return "\n".join(["static inline int32_t tr_ld32(const int8_t* p) { int32_t v; memcpy(&v, p, 4); return v; }",
                      f"typedef void (*tr_ptile_fn)({sig});", *(packed_tile(r, nr // 16) for r in range(1, mr + 1)),
                      "static const tr_ptile_fn TR_PTILES[MR] = {" + ", ".join(f"tr_p{r}" for r in range(1, mr + 1))
                      + "};"])


PACKED_C = r"""
static tr_buf tr_bp_buf, tr_apad_buf;

/* 16 x 16 32-bit words transposed in registers: r[i] holds row i in, column i out */
static inline void tr_t16(__m512i r[16]) {
    __m512i a[16], b[16], c[16];
    for (int i = 0; i < 8; ++i) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
            c[8 * i + j] = _mm512_shuffle_i32x4(b[8 * i + j], b[8 * i + j + 4], 0x88);
            c[8 * i + j + 4] = _mm512_shuffle_i32x4(b[8 * i + j], b[8 * i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; ++j) {
        r[j] = _mm512_shuffle_i32x4(c[j], c[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_i32x4(c[j], c[j + 8], 0xdd);
    }
}

/* panel p (columns p*NR ..) of B, flipped: word (q, c) = bytes k = 4q..4q+3 of column p*NR + c; zero past K and N.
   Column-major B: 16 columns x 64 bytes of K loaded, transposed as 16 x 16 words. Row-major: four rows of K x 16
   columns interleaved bytewise. */
static void tr_pack_panel(const tr_job* J, long p, long ka, long kp, uint8_t* restrict dst) {
    /* K bytes [ka, kp) of the panel (ka a multiple of 64), word q of them at dst + (q - ka / 4) * 4 * NR */
    dst -= ka * NR;
    for (long v = 0; v < NR / 16; ++v) {
        const long j0 = p * NR + v * 16;
#if B_COL
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        for (long k0 = ka; k0 < kp; k0 += 64) {
            const long nb = tr_min(64, J->k - k0);  /* >= 1: kp is K rounded up to 4 */
            const __mmask64 m = _cvtu64_mask64(nb >= 64 ? ~0ULL : ~0ULL >> (64 - nb));
            __m512i r[16];
            for (int c = 0; c < 16; ++c)
                r[c] = j0 + c < J->n ? _mm512_maskz_mov_epi8(m, _mm512_xor_si512(
                           _mm512_maskz_loadu_epi8(m, J->braw + (j0 + c) * J->k + k0), flip)) : _mm512_setzero_si512();
            tr_t16(r);
            const long qn = tr_min(16, (kp - k0) / 4);
            for (long q = 0; q < qn; ++q) _mm512_storeu_si512((void*)(dst + (k0 / 4 + q) * 4 * NR + v * 64), r[q]);
        }
#else
        const __m128i flip = _mm_set1_epi8((char)0x80);
        const long nc = tr_min(16, J->n - j0);
        const __mmask16 m = (__mmask16)(nc >= 16 ? 0xFFFFu : nc > 0 ? (1u << nc) - 1u : 0u);
        for (long q = ka / 4; q < kp / 4; ++q) {
            __m128i r[4];
            for (int t = 0; t < 4; ++t) {
                const long k = 4 * q + t;
                r[t] = k < J->k ? _mm_maskz_mov_epi8(m, _mm_xor_si128(_mm_maskz_loadu_epi8(m, J->braw + k * J->n + j0),
                                                                     flip)) : _mm_setzero_si128();
            }
            const __m128i lo01 = _mm_unpacklo_epi8(r[0], r[1]), hi01 = _mm_unpackhi_epi8(r[0], r[1]);
            const __m128i lo23 = _mm_unpacklo_epi8(r[2], r[3]), hi23 = _mm_unpackhi_epi8(r[2], r[3]);
            uint8_t* o = dst + q * 4 * NR + v * 64;
            _mm_storeu_si128((__m128i*)o, _mm_unpacklo_epi16(lo01, lo23));
            _mm_storeu_si128((__m128i*)(o + 16), _mm_unpackhi_epi16(lo01, lo23));
            _mm_storeu_si128((__m128i*)(o + 32), _mm_unpacklo_epi16(hi01, hi23));
            _mm_storeu_si128((__m128i*)(o + 48), _mm_unpackhi_epi16(hi01, hi23));
        }
#endif
    }
}

/* one finished tile's rows [i, i + R) and columns [j, j + NR) (fewer at N's edge), sums in res */
static void tr_finish_packed(const tr_job* J, long i, long j, int R, const int32_t* res, int first, int last) {
    const long cols = tr_min(NR, J->n - j);
    for (int r = 0; r < R; ++r) {
        const long row = i + r;
        for (long v = 0; v < cols; v += 16) {
            const int nl = (int)tr_min(16, cols - v);
            const __mmask16 mk = (__mmask16)((1u << nl) - 1u);
            const long at = row * J->n + j + v;
            __m512i s = _mm512_loadu_si512((const void*)(res + r * NR + v));
            if (!first) s = _mm512_add_epi32(s, _mm512_maskz_loadu_epi32(mk, J->part + at));
            if (!last) { _mm512_mask_storeu_epi32(J->part + at, mk, s); continue; }
            s = _mm512_sub_epi32(s, _mm512_set1_epi32((int)J->rs[row]));
#if OUT_KIND == 3
            _mm512_mask_storeu_epi32((int32_t*)J->out + at, mk, s);
#else
#if SCALE_MODE == 1  /* the sum times each scale in turn (sa * sb alone can underflow) */
            const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(J->sa[0])),
                                           _mm512_set1_ps(J->sb[0]));
#else
            const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(J->sa[row])),
                                           _mm512_maskz_loadu_ps(mk, J->sb + j + v));
#endif
#if HAS_EPILOGUE  /* the fused epilogue element by element (tr_put) */
            float t[16];
            _mm512_storeu_ps(t, f);
            for (int l = 0; l < nl; ++l) tr_put(J, row, j + v + l, t[l]);
#elif OUT_KIND == 0
            _mm512_mask_storeu_ps((float*)J->out + at, mk, f);
#elif OUT_KIND == 2
            _mm256_mask_storeu_epi16((uint16_t*)J->out + at, mk, _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
#else
            const __m512i u = _mm512_castps_si512(f);  /* bf16: round to nearest even, NaN quiet (as tr_f2bf) */
            const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            __m512i h = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd)), 16);
            h = _mm512_mask_mov_epi32(h, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
            _mm256_mask_storeu_epi16((uint16_t*)J->out + at, mk, _mm512_cvtepi32_epi16(h));
#endif
#endif
        }
    }
}

/* Few rows of A (all of a K chunk of them fit L2 beside a panel): each panel chunk is packed into this thread's
   scratch just before all rows meet it, so packed B never goes to memory and back. Many rows: every panel packed
   first, then met by A in blocks of MC rows (a panel packed once, not once a block). */
#define TR_PACK_AS_USED_BYTES (512L << 10)

static void tr_work_packed(void* arg, int tid, int nth) {
    tr_job* J = (tr_job*)arg;
    const long panels = tr_cdiv(J->n, NR), per = tr_cdiv(panels, nth);
    const long p0 = tid * per, p1 = tr_min(panels, p0 + per);
    const long kp = (J->k + KALIGN - 1) & ~(KALIGN - 1L);
    const long rows = tr_cdiv(J->m, nth);
    const int as_used = J->m * tr_min(KC, kp) <= TR_PACK_AS_USED_BYTES;
    tr_row_sums(J, tr_min(J->m, tid * rows), tr_min(J->m, (tid + 1) * rows));
    if (J->k % KALIGN) tr_pad_rows(J, tr_min(J->m, tid * rows), tr_min(J->m, (tid + 1) * rows));
    if (!as_used)
        for (long p = p0; p < p1; ++p) tr_pack_panel(J, p, 0, kp, J->bp + p * NR * kp);  /* this thread's panels */
    if (nth > 1) { int sense = 0; tr_barrier_wait(&J->bar, &sense); }  /* every row sum (and padded row) is in */
    int32_t res[MR * NR] __attribute__((aligned(64)));
    uint8_t* scratch = J->bp + (size_t)tid * NR * KC;
#if AMX
    int tr_amx_rows = -1;  /* the rows this thread's tiles are configured for (none yet) */
#endif
    for (long k0 = 0; k0 < kp; k0 += KC) {
        const long kk = tr_min(KC, kp - k0);
        const int first = k0 == 0, last = k0 + kk == kp;
        for (long m0 = 0; m0 < J->m; m0 += (as_used ? J->m : MC)) {
            const long m1 = tr_min(J->m, m0 + (as_used ? J->m : MC));
            for (long p = p0; p < p1; ++p) {
                const uint8_t* panel = J->bp + p * NR * kp + k0 * NR;
                if (as_used) { tr_pack_panel(J, p, k0, k0 + kk, scratch); panel = scratch; }
                for (long i = m0; i < m1; i += MR) {
                    const int R = (int)tr_min(MR, m1 - i);
                    TR_PTILE(R, J->apad + i * J->lda + k0, J->lda, panel, kk / 4, res);
                    tr_finish_packed(J, i, p * NR, R, res, first, last);
                }
            }
        }
    }
#if AMX
    if (tr_amx_rows >= 0) tr_amx_release();  /* this thread's tiles */
#endif
}
"""
