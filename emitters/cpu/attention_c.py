"""The C body of the CPU attention kernel (emitters/cpu/attention.py renders it with its constants).

Scores are kept transposed, S^T[key][row]: one vector holds VL query rows of one key, so a row's max, sum
and rescale factor are vectors of VL rows and the online softmax needs no horizontal reduction. Q is packed
transposed and pre-scaled by scale * log2(e) (the softmax runs in base 2), K is read in place (fp32) or
converted once per block (gathered through the block table when paged, ``AT_PAGED``, from the token-major
rows when packed, ``AT_PACKED``). Every range is an entry's: its length (``at_len``) takes SK's place (and
SQ's when packed: ``AT_ROWS``), so its diagonal is aligned at its own last key; ``AT_ROW``, ``AT_QSTRIDE``
and ``AT_LSE`` address a row of q, O and lse. A masked score is -AT_BIG, a finite "minus infinity": the
arithmetic stays free of inf - inf, and a row whose max is still -AT_BIG at the end kept no key (O = 0, lse =
-inf), or kept keys whose scores are all -inf or NaN (O and lse NaN, as NumPy's softmax gives). A row that has
kept nothing so far accumulates junk with weight 1; its first kept key gives alpha = 2^(-AT_BIG - m) = 0.
"""

TASK_C = r"""
#define AT_BIG 0x1p100f
#define AT_LN2 0.693147180559945f
#define AT_ALWAYS static inline __attribute__((always_inline))

#if AT_PACKED
/* Packed entries: entry b's queries are its sk keys' tokens, q and O token-major (a token's H heads of D in a
   row), lse (H, T). */
#define AT_ROWS(J, sk) (sk)
#define AT_ROW(J, b, h, r) ((at_off(J, b) + (r)) * J->H + (h)) * D
#define AT_QSTRIDE(J) (J->H * D)
#define AT_LSE(J, b, h, r) (h) * J->T + at_off(J, b) + (r)

/* Entry b's first token: its offset clamped into [0, T] (an unchecked offset reads no row outside the arrays). */
static inline long at_off(const at_job* J, long b) {
    const long c = J->cu[b];
    return c < 0 ? 0 : (c > J->T ? J->T : c);
}

/* Entry b's tokens: its clamped offsets' difference, clamped into [0, SK]. */
static inline long at_len(const at_job* J, long b) {
    const long n = at_off(J, b + 1) - at_off(J, b);
    return n < 0 ? 0 : (n > J->SK ? J->SK : n);
}
#else
/* Every entry holds SQ queries; q and O are (B, H, SQ, D), lse (B, H, SQ). Spelled as the expressions they
   stand for (their arguments are names), so these builds preprocess to the code they had before packing. */
#define AT_ROWS(J, sk) J->SQ
#define AT_ROW(J, b, h, r) ((b * J->H + h) * J->SQ + r) * D
#define AT_QSTRIDE(J) D
#define AT_LSE(J, b, h, r) (b * J->H + h) * J->SQ + r

/* Batch entry b's keys: its seq_lens entry clamped into [0, SK] (an unchecked length reads no key past the
   capacity), or SK without lengths. */
static inline long at_len(const at_job* J, long b) {
    if (!J->lens) return J->SK;
    const long n = J->lens[b];
    return n < 0 ? 0 : (n > J->SK ? J->SK : n);
}
#endif

/* Row i's kept keys [lo, hi) in an entry of sk keys: its diagonal aligned at the entry's own length. */
static inline void at_range(const at_job* J, long sk, long i, long* lo, long* hi) {
    const long diag = i + sk - AT_ROWS(J, sk);
    long a = diag - J->left, b = diag + J->right + 1;
    a = a < 0 ? 0 : (a > sk ? sk : a);
    b = b < 0 ? 0 : (b > sk ? sk : b);
    *lo = a < b ? a : b;
    *hi = b;
}

/* 2^x for x <= 0: 2^n (n = round(x), by the exponent field) times a degree-5 fit of 2^f on [-1/2, 1/2]
   (relative error 2.4e-7); x below -127 is clamped there, which the exponent field flushes to 0. */
AT_ALWAYS vf at_exp2(vf x) {
#if !AT_SCALEF
    x = vf_max(vf_set1(-127.0f), x);  /* the constant first: a NaN x stays NaN (max returns its second operand) */
#endif
    const vf n = vf_round(x), f = vf_sub(x, n);
    vf p = vf_fma(vf_set1(0.001327647129073739f), f, vf_set1(0.009675541892647743f));
    p = vf_fma(p, f, vf_set1(0.05550713092088699f));
    p = vf_fma(p, f, vf_set1(0.24022120237350464f));
    p = vf_fma(p, f, vf_set1(0.6931469440460205f));
    p = vf_fma(p, f, vf_set1(1.0000001192092896f));
#if AT_SCALEF
    return _mm512_scalef_ps(p, n);  /* p 2^n in one instruction, 0 for n far below -126: no clamp */
#else
    return vf_mul(p, vf_exp2i(n));
#endif
}

/* S^T of keys [j, j + nk) x rows [i0, i0 + RV VL): RV row vectors x nk keys of accumulators, each K value
   broadcast once for the RV vectors; the rows' running max (over the block's keys) updated in mx. */
AT_ALWAYS void at_st_tile(const float* restrict qt, const float* restrict kb, float* restrict st,
                          float* restrict mx, long i0, long j, const int nk) {
    vf acc[RV][RK];
#pragma GCC unroll 16
    for (int r = 0; r < RV; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < nk; ++c) acc[r][c] = vf_zero();
    const float* kr = kb + j * D;
#pragma GCC unroll 2
    for (long d = 0; d < D; ++d) {
        vf qv[RV];
#pragma GCC unroll 16
        for (int r = 0; r < RV; ++r) qv[r] = vf_load(qt + d * QR + i0 + r * VL);
#pragma GCC unroll 16
        for (int c = 0; c < nk; ++c) {
            const vf b = vf_bcast(kr + c * D + d);
#pragma GCC unroll 16
            for (int r = 0; r < RV; ++r) acc[r][c] = vf_fma(qv[r], b, acc[r][c]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < RV; ++r) {
        vf t = vf_load(mx + i0 + r * VL);
#pragma GCC unroll 16
        for (int c = 0; c < nk; ++c) {
            vf_store(st + (j + c) * QR + i0 + r * VL, acc[r][c]);
            t = vf_max(t, acc[r][c]);
        }
        vf_store(mx + i0 + r * VL, t);
    }
}

/* S^T[nc][QR] = K Q^T of the block's nc keys, the rows' max in mx. */
static void at_scores(const float* restrict qt, const float* restrict kb, float* restrict st, float* restrict mx,
                      long nc) {
    for (long i = 0; i < QR; ++i) mx[i] = -AT_BIG;
    for (long i0 = 0; i0 < QR; i0 += RV * VL) {
        long j = 0;
        for (; j + RK <= nc; j += RK) at_st_tile(qt, kb, st, mx, i0, j, RK);
#if RK > 4
        for (; j + 4 <= nc; j += 4) at_st_tile(qt, kb, st, mx, i0, j, 4);
#endif
        for (; j < nc; ++j) at_st_tile(qt, kb, st, mx, i0, j, 1);
    }
}

/* Rows [i0, i0 + VL) of an edge block: scores outside each row's kept keys [ka, ke) become -AT_BIG; their
   max over the kept ones into mx. */
static void at_mask_edge(float* restrict st, float* restrict mx, const float* ka, const float* ke, long i0, long nc) {
    const vf one = vf_set1(1.0f), zero = vf_zero(), a = vf_load(ka + i0), e = vf_load(ke + i0);
    const vf nbig = vf_set1(-AT_BIG);
    vf m = nbig, jv = zero;
    for (long j = 0; j < nc; ++j, jv = vf_add(jv, one)) {
        /* kept iff a <= j < e, i.e. min(j + 1 - a, e - j) >= 1 (integers): the score there, else -BIG; a
           select, not arithmetic, so a NaN score stays NaN where kept and is dropped where masked (as
           torch's masked fill drops it) */
        const vf t = vf_min(vf_sub(vf_add(jv, one), a), vf_sub(e, jv));
        const vf s = vf_select_pos(t, vf_load(st + j * QR + i0), nbig);
        vf_store(st + j * QR + i0, s);
        m = vf_max(m, s);
    }
    vf_store(mx + i0, m);
}

/* The block into the online softmax, VL rows a step: m_new = max(m, block max), alpha = 2^(m - m_new),
   P = 2^(S - m_new) in place, l = l alpha + sum P. */
static void at_softmax(float* restrict st, float* restrict mx, float* restrict m, float* restrict l,
                       float* restrict alpha, const float* ka, const float* ke, const float* edge, long nc) {
    for (long i0 = 0; i0 < QR; i0 += VL) {
        if (edge && edge[i0 / VL] != 0.0f) at_mask_edge(st, mx, ka, ke, i0, nc);
        const vf mo = vf_load(m + i0), mn = vf_max(mo, vf_load(mx + i0)), al = at_exp2(vf_sub(mo, mn));
        vf s0 = vf_zero(), s1 = vf_zero();
        long j = 0;
        for (; j + 2 <= nc; j += 2) {
            const vf p0 = at_exp2(vf_sub(vf_load(st + j * QR + i0), mn));
            const vf p1 = at_exp2(vf_sub(vf_load(st + (j + 1) * QR + i0), mn));
            vf_store(st + j * QR + i0, p0);
            vf_store(st + (j + 1) * QR + i0, p1);
            s0 = vf_add(s0, p0);
            s1 = vf_add(s1, p1);
        }
        if (j < nc) {
            const vf p0 = at_exp2(vf_sub(vf_load(st + j * QR + i0), mn));
            vf_store(st + j * QR + i0, p0);
            s0 = vf_add(s0, p0);
        }
        vf_store(l + i0, vf_fma(vf_load(l + i0), al, vf_add(s0, s1)));
        vf_store(m + i0, mn);
        vf_store(alpha + i0, al);
    }
}

/* O^T[d0, d0 + nd) x rows [i0, i0 + RV VL) = O^T alpha + (P V)^T over the block's nc keys: the S^T tile's
   shape again, rows of P^T loaded as vectors and each V value broadcast once for the RV vectors. */
AT_ALWAYS void at_pv_tile(const float* restrict pt, const float* restrict vs, float* restrict ot,
                          const float* restrict alpha, long i0, long d0, long nc, const int nd) {
    vf acc[RV][RK];
#pragma GCC unroll 16
    for (int r = 0; r < RV; ++r) {
        const vf a = vf_load(alpha + i0 + r * VL);
#pragma GCC unroll 16
        for (int c = 0; c < nd; ++c) acc[r][c] = vf_mul(vf_load(ot + (d0 + c) * QR + i0 + r * VL), a);
    }
#pragma GCC unroll 2
    for (long j = 0; j < nc; ++j) {
        vf pv[RV];
#pragma GCC unroll 16
        for (int r = 0; r < RV; ++r) pv[r] = vf_load(pt + j * QR + i0 + r * VL);
#pragma GCC unroll 16
        for (int c = 0; c < nd; ++c) {
            const vf b = vf_bcast(vs + j * D + d0 + c);
#pragma GCC unroll 16
            for (int r = 0; r < RV; ++r) acc[r][c] = vf_fma(pv[r], b, acc[r][c]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < RV; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < nd; ++c) vf_store(ot + (d0 + c) * QR + i0 + r * VL, acc[r][c]);
}

/* O^T (D x QR) = O^T alpha + (P V)^T for the rows below nr. */
static void at_pv(const float* restrict pt, const float* restrict vs, float* restrict ot, const float* alpha,
                  long nr, long nc) {
    for (long i0 = 0; i0 < nr; i0 += RV * VL) {
        long d = 0;
        for (; d + RK <= D; d += RK) at_pv_tile(pt, vs, ot, alpha, i0, d, nc, RK);
#if RK > 4
        for (; d + 4 <= D; d += 4) at_pv_tile(pt, vs, ot, alpha, i0, d, nc, 4);
#endif
        for (; d < D; ++d) at_pv_tile(pt, vs, ot, alpha, i0, d, nc, 1);
    }
}

#if AT_PACKED
/* Keys [c0, c0 + nc) of entry b (g: its first token's row of the kv head) from the token-major rows, KVH * D
   apart, into fp32 rows of D. */
static void at_gather(const at_job* J, const in_t* g, long b, long c0, long nc, float* restrict dst) {
    const long stride = J->KVH * D;
    const in_t* src = g + c0 * stride;
    (void)b;
    for (long j = 0; j < nc; ++j, src += stride)
        for (long d = 0; d < D; ++d) dst[j * D + d] = IN2F(src[d]);
}
#elif AT_PAGED
/* Keys [c0, c0 + nc) of entry b gathered from the pool into fp32 rows of D, a page's run of rows at a time:
   key t is row t % P of page block_table[b][t / P] (clamped into the pool, so an unchecked table never reads
   outside it); g is the pool offset to the kv head, its rows KVH * D apart. */
static void at_gather(const at_job* J, const in_t* g, long b, long c0, long nc, float* restrict dst) {
    const long stride = J->KVH * D;
    const int32_t* row = J->table + b * J->cols;
    for (long j = 0; j < nc;) {
        const long t = c0 + j, r = t % J->P;
        long pg = row[t / J->P], n = J->P - r < nc - j ? J->P - r : nc - j;
        pg = pg < 0 ? 0 : (pg >= J->pages ? J->pages - 1 : pg);
        const in_t* src = g + (pg * J->P + r) * stride;
        for (long e = j + n; j < e; ++j, src += stride)
            for (long d = 0; d < D; ++d) dst[j * D + d] = IN2F(src[d]);
    }
}
#endif

/* Entry b's K or V of one kv head: its first token's row at the head (packed), the pool offset to the head
   (paged), or its (SK x D) rows. */
static inline const in_t* at_kv(const at_job* J, const in_t* g, long b, long kvh) {
#if AT_PACKED
    return g + (at_off(J, b) * J->KVH + kvh) * D;
#elif AT_PAGED
    (void)b;
    return g + kvh * D;
#else
    return g + (b * J->KVH + kvh) * J->SK * D;
#endif
}

/* K of keys [c0, c0 + nc) of entry b (kg: at_kv's) in fp32 rows of D (converted or gathered where it cannot be
   read in place). */
static const float* at_pack_k(const at_job* J, const in_t* kg, long b, long c0, long nc, float* kb) {
#if AT_PAGED || AT_PACKED
    at_gather(J, kg, b, c0, nc, kb);
    return kb;
#elif PACK_K
    (void)J; (void)b;
    for (long j = 0; j < nc; ++j)
        for (long d = 0; d < D; ++d) kb[j * D + d] = IN2F(kg[(c0 + j) * D + d]);
    return kb;
#else
    (void)J; (void)b; (void)nc; (void)kb;
    return (const float*)(kg + c0 * D);
#endif
}

/* V of keys [c0, c0 + nc) of entry b in fp32 rows of D, converted or gathered where it cannot be read in place. */
static const float* at_pack_v(const at_job* J, const in_t* vg, long b, long c0, long nc, float* vs) {
#if AT_PAGED || AT_PACKED
    at_gather(J, vg, b, c0, nc, vs);
    return vs;
#elif PACK_V
    (void)J; (void)b;
    for (long j = 0; j < nc * D; ++j) vs[j] = IN2F(vg[c0 * D + j]);
    return vs;
#else
    (void)J; (void)b; (void)nc; (void)vs;
    return (const float*)(vg + c0 * D);
#endif
}

/* The q blocks' key ranges in an entry of sk keys: [lo, hi) of the union of rows [r0, r1) (lo and hi grow
   with the row). */
static void at_block_range(const at_job* J, long sk, long qb, long* lo, long* hi) {
    const long r0 = qb * BQ, r1 = r0 + BQ < AT_ROWS(J, sk) ? r0 + BQ : AT_ROWS(J, sk);
    long x;
    at_range(J, sk, r0, lo, &x);
    at_range(J, sk, r1 - 1, &x, hi);
}

#if AT_PACKED
/* Pre-pack task t: tokens [t BK, t BK + BK) of K and V, every kv head, into head-major fp32 rows (KVH x T x D),
   where keys [c0, c0 + nc) of entry b are rows kvh T + cu[b] + c0 onward for each of its q blocks and heads.
   Every token is packed: each of an entry's keys is kept by its own query (the diagonal). */
static void at_prepack(const at_job* J, long t) {
    const long t1 = (t + 1) * BK < J->T ? (t + 1) * BK : J->T;
    for (long r = t * BK; r < t1; ++r)
        for (long g = 0; g < J->KVH; ++g) {
            const in_t *ks = J->k + (r * J->KVH + g) * D, *vs = J->v + (r * J->KVH + g) * D;
            float *kd = J->kp + (g * J->T + r) * D, *vd = J->vp + (g * J->T + r) * D;
            for (long d = 0; d < D; ++d) { kd[d] = IN2F(ks[d]); vd[d] = IN2F(vs[d]); }
        }
}

/* Entry b's q blocks before it (tb[b]) and in all (returned), its most in mx; with tb NULL only counted. */
static long at_packed_blocks(const at_job* J, long* tb, long* mx) {
    long n = 0;
    *mx = 0;
    for (long b = 0; b < J->B; ++b) {
        const long nq = (at_len(J, b) + BQ - 1) / BQ;
        if (tb) tb[b] = n;
        n += nq;
        *mx = nq > *mx ? nq : *mx;
    }
    if (tb) tb[J->B] = n;
    return n;
}

/* Task t's entry, head and q block: entry b's tasks are [H tb[b], H tb[b + 1]), head by head, each head's q
   blocks the last first (under a causal mask they hold the most keys). */
static void at_packed_task(const at_job* J, long t, long* b, long* h, long* qb) {
    const long g = t / J->H;
    long lo = 0, hi = J->B - 1;  /* the last entry with tb[b] <= g: its blocks hold g (empty ones hold none) */
    while (lo < hi) {
        const long mid = (lo + hi + 1) / 2;
        if (J->tb[mid] <= g) lo = mid; else hi = mid - 1;
    }
    const long nq = J->tb[lo + 1] - J->tb[lo], local = t - J->H * J->tb[lo];
    *b = lo;
    *h = local / nq;
    *qb = nq - 1 - local % nq;
}
#else
/* Does any q block of an entry of sk keys compute K/V block kb? (A block none needs is never packed.) */
static int at_block_used(const at_job* J, long sk, long kb) {
    const long nkb = (J->SK + BK - 1) / BK;
    for (long qb = 0; qb < J->nqb; ++qb) {
        long lo, hi;
        at_block_range(J, sk, qb, &lo, &hi);
        if (lo < hi && kb >= lo / BK && kb <= (hi - 1) / BK && (!J->mask || J->mask[qb * nkb + kb])) return 1;
    }
    return 0;
}

/* Pre-pack task t of B x KVH x nkb: K (and V) of one block converted (gathered) once for every q block, up
   to the entry's length. */
static void at_prepack(const at_job* J, long t) {
    const long nkb = (J->SK + BK - 1) / BK, kb = t % nkb, bkv = t / nkb, b = bkv / J->KVH, kvh = bkv % J->KVH;
    const long sk = at_len(J, b);
    if (!at_block_used(J, sk, kb)) return;
    const long c0 = kb * BK, c1 = c0 + BK < sk ? c0 + BK : sk;
    at_pack_k(J, at_kv(J, J->k, b, kvh), b, c0, c1 - c0, J->kp + t * KBLK);
    at_pack_v(J, at_kv(J, J->v, b, kvh), b, c0, c1 - c0, J->vp + t * VBLK);
}
#endif

/* Each row's kept keys [ka, ke) of the block [c0, c0 + nc) (rows past nr: all), and per VL rows whether
   any row misses part of the block (an edge: its scores are masked element by element). NULL where every
   row keeps the whole block (the first row's keys reach past it, the last row's start before it). */
static float* at_edges(const at_job* J, long sk, long r0, long nr, long c0, long nc, float* ka, float* ke,
                       float* edge) {
    long lo, hi, x;
    at_range(J, sk, r0 + nr - 1, &lo, &x);
    at_range(J, sk, r0, &x, &hi);
    if (lo <= c0 && hi >= c0 + nc) return NULL;
    for (long i0 = 0; i0 < QR; i0 += VL) {
        int partial = 0;
        for (long i = i0; i < i0 + VL; ++i) {
            long lo = c0, hi = c0 + nc;
            if (i < nr) at_range(J, sk, r0 + i, &lo, &hi);
            long a = lo - c0, e = hi - c0;
            a = a < 0 ? 0 : (a > nc ? nc : a);
            e = e < a ? a : (e > nc ? nc : e);
            ka[i] = (float)a;
            ke[i] = (float)e;
            partial |= a > 0 || e < nc;
        }
        edge[i0 / VL] = (float)partial;
    }
    return edge;
}

/* Does row r of an entry of sk keys keep a key by the mask (causal, window, block mask), whatever its scores? */
static int at_row_keeps(const at_job* J, long sk, long r) {
    long lo, hi;
    at_range(J, sk, r, &lo, &hi);
    if (lo >= hi) return 0;
    if (!J->mask) return 1;
    const long nkb = (J->SK + BK - 1) / BK, qb = r / BQ;
    for (long kb = lo / BK; kb <= (hi - 1) / BK; ++kb)
        if (J->mask[qb * nkb + kb]) return 1;
    return 0;
}

/* A row whose max rose above -AT_BIG is O / l. One that did not either kept no key (O = 0, lse = -inf) or
   kept keys whose scores are all -inf or NaN: its softmax is NaN, as NumPy's and the reference's are. */
static void at_store(const at_job* J, long sk, long b, long h, long r0, long nr, const float* ot, const float* m,
                     const float* l) {
    in_t* og = J->out + AT_ROW(J, b, h, r0);
    for (long i = 0; i < nr; ++i) {
        const int scored = m[i] > -AT_BIG;
        const int nan_row = !scored && at_row_keeps(J, sk, r0 + i);
        const float inv = scored ? 1.0f / l[i] : nan_row ? NAN : 0.0f;
        for (long d = 0; d < D; ++d) og[i * AT_QSTRIDE(J) + d] = F2OUT(ot[d * QR + i] * inv);
        if (J->lse)
            J->lse[AT_LSE(J, b, h, r0) + i] = scored ? m[i] * AT_LN2 + logf(l[i]) : nan_row ? NAN : -INFINITY;
    }
}

static long at_task(const at_job* J, long task, float* ws) {
#if AT_PACKED
    long b, h, qb;
    at_packed_task(J, task, &b, &h, &qb);
#else
    /* the last q blocks first: under a causal mask they hold the most keys */
    const long qb = J->nqb - 1 - task % J->nqb, bh = task / J->nqb, h = bh % J->H, b = bh / J->H;
#endif
    const long kvh = h / (J->H / J->KVH), sk = at_len(J, b);  /* the entry's keys: its own diagonal */
    const long r0 = qb * BQ, r1 = r0 + BQ < AT_ROWS(J, sk) ? r0 + BQ : AT_ROWS(J, sk), nr = r1 - r0;
    float *qt = ws, *kt = qt + D * QR, *vs = kt + KBLK, *st = vs + VBLK, *o = st + BK * QR;
    float *m = o + QR * D, *l = m + QR, *alpha = l + QR, *mx = alpha + QR, *ka = mx + QR, *ke = ka + QR;
    float* edge = ke + QR;
    const in_t* qg = J->q + AT_ROW(J, b, h, r0);
    const in_t* kg = at_kv(J, J->k, b, kvh);
    const in_t* vg = at_kv(J, J->v, b, kvh);
    long lo0, hi1, tiles = 0;
    at_block_range(J, sk, qb, &lo0, &hi1);
    for (long i = 0; i < QR; ++i) { m[i] = -AT_BIG; l[i] = 0.0f; }
    memset(o, 0, sizeof(float) * QR * D);
    if (lo0 < hi1) {
        const float scale = J->scale * 1.4426950408889634f;  /* base-2 softmax */
        for (long d = 0; d < D; ++d)
            for (long i = 0; i < QR; ++i) qt[d * QR + i] = i < nr ? IN2F(qg[i * AT_QSTRIDE(J) + d]) * scale : 0.0f;
        const long nkb = (J->SK + BK - 1) / BK;
        for (long kb = lo0 / BK; kb <= (hi1 - 1) / BK; ++kb) {
            if (J->mask && !J->mask[qb * nkb + kb]) continue;
            const long c0 = kb * BK, nc = (c0 + BK < sk ? c0 + BK : sk) - c0;
            ++tiles;
#if AT_PACKED
            const long pt = (kvh * J->T + at_off(J, b) + c0) * D;  /* the pre-packed rows, when there are */
            const float* kb_p = J->kp ? J->kp + pt : at_pack_k(J, kg, b, c0, nc, kt);
            const float* vb = J->kp ? J->vp + pt : at_pack_v(J, vg, b, c0, nc, vs);
#else
            const long pt = (b * J->KVH + kvh) * nkb + kb;  /* the pre-packed block, when there are */
            const float* kb_p = PACK_K && J->kp ? J->kp + pt * KBLK : at_pack_k(J, kg, b, c0, nc, kt);
            const float* vb = PACK_V && J->kp ? J->vp + pt * VBLK : at_pack_v(J, vg, b, c0, nc, vs);
#endif
            const float* edges = at_edges(J, sk, r0, nr, c0, nc, ka, ke, edge);
            at_scores(qt, kb_p, st, mx, nc);
            at_softmax(st, mx, m, l, alpha, ka, ke, edges, nc);
            at_pv(st, vb, o, alpha, nr, nc);
        }
    }
    at_store(J, sk, b, h, r0, nr, o, m, l);
    return tiles;
}

static void at_worker(void* arg, int tid, int nthreads) {
    at_job* J = (at_job*)arg;
    (void)nthreads;
    float* ws = J->ws + (size_t)tid * WS;
    long tiles = 0;
    if (J->kp) {
        for (;;) {
            const long t = __atomic_fetch_add(&J->next_pack, 1, __ATOMIC_RELAXED);
            if (t >= J->pack_tasks) break;
            at_prepack(J, t);
        }
        int sense = 0;
        tr_barrier_wait(&J->bar, &sense);
    }
    for (;;) {
        const long t = __atomic_fetch_add(&J->next, 1, __ATOMIC_RELAXED);
        if (t >= J->tasks) break;
        tiles += at_task(J, t, ws);
    }
    if (J->stats) __atomic_fetch_add(J->stats, (int64_t)tiles, __ATOMIC_RELAXED);
}

static tr_buf at_ws_buf, at_pack_buf;
#if AT_PACKED
static tr_buf at_blocks_buf;  /* tb: each entry's q blocks before it */
#endif
"""
