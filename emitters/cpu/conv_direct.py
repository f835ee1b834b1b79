"""NHWC fp32 convolution with A read in place: the micro-kernel broadcasts input channels straight from
the input (or from one cheap copy of it), so no patch is ever gathered or packed.

Why: the packed implicit GEMM (conv.py) writes every element of A (output pixels x R*S*C) into an
MR-interleaved panel before use; with few output channels (N = 64) that packing costs as much as the
FMAs. Here A is a row-major view with lda = C:

- 1x1, no padding, stride 1: A is the input itself, the convolution a plain GEMM.
- 1x1, no padding, stride > 1: A is a subsampled copy of the input (P x Q pixels, M*C elements).
- stride 1, any R x S, padding, dilation: A is a zero-padded copy (Hp x Wp pixels, Wp = W + pw: a
  row's right padding is the next row's left padding). Output pixel rows are laid out on the padded
  width ("virtual" pixels v = (n*Hp + p)*Wp + q), so filter tap (r, s) reads the rows
  v + r*dh*Wp + s*dw: one constant offset per tap, lda = C. A K block runs one micro-kernel call per
  tap it crosses (sums kept in the C tile between them); the rows with q >= Q (and p >= P) are
  computed into a workspace and dropped when the valid rows are copied out. Their share is (Wp - Q)/Wp (3x3: 3.5 % at 28x28, 12.5 % at 7x7).

- any other stride: the patches are copied once (im2col, M x R*S*C, a filter row's S*C values one
  contiguous run where its taps lie inside the image: 21-value runs in the stem) and read in place;
  above 16 MiB of patches (a batch) they are gathered while packing instead (each unit packs its A block).

B is the filter in OHWI ("col" layout), packed by AVX-512 gathers (else transposed in 16-step blocks).
"""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import BadInputError

from .gemm_core import CoreSpec, render_core
from .isa import CpuIsa
from .schedule import CpuSchedule

FIELDS = """    const float* src;          /* A: the input, or its padded / subsampled copy */
    long C, S, dh, dw, Wp;     /* channels; taps; the source's row pitch in pixels */
    int inplace;               /* A read in place; else gathered from x while packing */
    const float* x;
    long H, W, P, Q, sh, sw, ph, pw;"""

HELPERS = """/* the address of A(i0, p0); A's rows are contiguous inside one filter tap */
static inline const float* conv_a(const tr_job* J, long i0, long p0) {
    const long tap = p0 / J->C, c0 = p0 - tap * J->C;
    return J->src + (i0 + (tap / J->S) * J->dh * J->Wp + (tap % J->S) * J->dw) * J->C + c0;
}

static void ukernel_row_packed(int kc, const float* a, long lda, const float* b, long ldb, float* c, long ldc,
                               int accumulate);

/* a full in-place panel over K steps pc .. pc + kc: one micro-kernel call per filter tap it crosses, the
   sums kept in C (L1) between them; K blocks need not end at a tap */
static void conv_uk(const tr_job* J, long i0, long pc, int kc, const float* b, float* dst, long ld, int acc) {
    for (int p = 0; p < kc;) {
        const long kk = pc + p, len = tr_min(J->C - kk % J->C, kc - p);
        ukernel_row_packed((int)len, conv_a(J, i0, kk), J->C, b + (long)p * NR, NR, dst, ld, acc || p > 0);
        p += (int)len;
    }
}
"""

PACK_A = """    if (J->inplace) {
        for (int p = 0; p < kc;) {
            const long len = tr_min(J->C - (p0 + p) % J->C, kc - p);
            const float* s0 = conv_a(J, i0, p0 + p);
            for (int i = 0; i < mr; ++i)
                for (long t = 0; t < len; ++t) dst[(long)(p + t) * MR + i] = s0[(long)i * J->C + t];
            p += (int)len;
        }
    } else {
        /* rows are output pixels, columns kk = (r*S + s)*C + c: a filter row's S*C values are one
           contiguous run of the input when its taps lie inside the image row (dw = 1), else tap by tap */
        /* no division per element or run: the rows' pixels and the runs' filter rows are stepped */
        const long PQ = J->P * J->Q, SC = J->S * J->C, r0 = p0 / SC, rem0 = p0 - r0 * SC;
        long nimg = i0 / PQ, oh = (i0 - nimg * PQ) / J->Q, ow = i0 - nimg * PQ - oh * J->Q;
#if defined(__AVX512F__)
        const long iwa = ow * J->sw - J->pw, iwz = (ow + MR - 1) * J->sw - J->pw;
        if (mr == MR && MR <= 16 && J->dw == 1 && ow + MR <= J->Q && iwa >= 0 && iwz + J->S <= J->W) {
            /* MR pixels of one output row, all their taps inside the image row: a k step's MR values
               are one gather at a stride of sw*C (the stem: 147 gathers a tile, not 882 loads) */
            const __mmask16 mask = (__mmask16)((1u << MR) - 1u);
            const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                   _mm512_set1_epi32((int)(J->sw * J->C)));
            const float* xn = J->x + nimg * J->H * J->W * J->C;
            long r = r0, rem = rem0;
            for (long p = 0; p < kc; ++r, rem = 0) {
                const long h = oh * J->sh - J->ph + r * J->dh, run = tr_min(SC - rem, kc - p);
                if (h < 0 || h >= J->H) {
                    for (long t = 0; t < run; ++t) _mm512_mask_storeu_ps(dst + (p + t) * MR, mask, _mm512_setzero_ps());
                } else {
                    const float* src = xn + (h * J->W + iwa) * J->C + rem;
                    for (long t = 0; t < run; ++t)
                        _mm512_mask_storeu_ps(dst + (p + t) * MR, mask,
                                              _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, idx, src + t, 4));
                }
                p += run;
            }
            return;
        }
#endif
        for (int i = 0; i < mr; ++i) {
            const long ih0 = oh * J->sh - J->ph, iw0 = ow * J->sw - J->pw;
            const float* xn = J->x + nimg * J->H * J->W * J->C;
            const int inside = J->dw == 1 && iw0 >= 0 && iw0 + J->S <= J->W;
            long r = r0, rem = rem0;
            for (long p = 0; p < kc; ++r, rem = 0) {
                const long h = ih0 + r * J->dh;
                const long run = tr_min(SC - rem, kc - p);
                float* d = dst + p * MR + i;
                if (h < 0 || h >= J->H) {
                    for (long t = 0; t < run; ++t) d[t * MR] = 0.0f;
                } else if (inside) {
                    const float* src = xn + (h * J->W + iw0) * J->C + rem;
                    for (long t = 0; t < run; ++t) d[t * MR] = src[t];
                } else {
                    for (long t = 0; t < run; ++t) {
                        const long q = rem + t, s = q / J->C, w = iw0 + s * J->dw;
                        d[t * MR] = w >= 0 && w < J->W ? xn[(h * J->W + w) * J->C + q - s * J->C] : 0.0f;
                    }
                }
                p += run;
            }
            if (++ow == J->Q) { ow = 0; if (++oh == J->P) { oh = 0; ++nimg; } }
        }
    }
    for (int i = mr; i < MR; ++i)
        for (int p = 0; p < kc; ++p) dst[(long)p * MR + i] = 0.0f;"""

PACK_B = """    /* element (p, j) at b[j * ldb + p]: a full AVX-512 panel by gathers (16 filters' values of one k step,
       each line read serves 16 k steps from L1); else transposed in blocks of 16 k steps */
    const float* src = J->b + j0 * J->ldb + p0;
#if defined(__AVX512F__)
    if (nr == NR && NR % 16 == 0) {
        __m512i idx[NR / 16];
        for (int v = 0; v < NR / 16; ++v)
            idx[v] = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(16 * v),
                                        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
                                        _mm512_set1_epi32((int)J->ldb));
        for (int p = 0; p < kc; ++p)
            for (int v = 0; v < NR / 16; ++v)
                _mm512_store_ps(dst + (long)p * NR + 16 * v, _mm512_i32gather_ps(idx[v], src + p, 4));
        return;
    }
#endif
    for (int pb = 0; pb < kc; pb += 16) {
        const int pe = pb + 16 < kc ? pb + 16 : kc;
        for (int j = 0; j < nr; ++j) {
            const float* s = src + j * J->ldb;
            for (int p = pb; p < pe; ++p) dst[(long)p * NR + j] = s[p];
        }
        for (int j = nr; j < NR; ++j)
            for (int p = pb; p < pe; ++p) dst[(long)p * NR + j] = 0.0f;
    }"""

COPIES = """
/* dst (N, Hd, Wd, C) = x at (h*sh - ph, w*sw - pw), zero outside; rows of dst split between threads */
typedef struct { const float* x; float* dst; long N, H, W, C, Hd, Wd, sh, sw, ph, pw; } cv_in;

static void conv_copy_in(void* arg, int tid, int nthreads) {
    const cv_in* A = (const cv_in*)arg;
    const long rows = A->N * A->Hd, C = A->C;
    for (long rr = rows * tid / nthreads; rr < rows * (tid + 1) / nthreads; ++rr) {
        const long n = rr / A->Hd, ih = (rr % A->Hd) * A->sh - A->ph;
        float* d = A->dst + rr * A->Wd * C;
        if (ih < 0 || ih >= A->H) { memset(d, 0, sizeof(float) * (size_t)(A->Wd * C)); continue; }
        const float* xrow = A->x + (n * A->H + ih) * A->W * C;
        for (long w = 0; w < A->Wd; ++w) {
            const long iw = w * A->sw - A->pw;
            if (iw < 0 || iw >= A->W) memset(d + w * C, 0, sizeof(float) * (size_t)C);
            else memcpy(d + w * C, xrow + iw * C, sizeof(float) * (size_t)C);
        }
    }
}

/* out (N, P, Q, K) = the valid rows of the workspace (N, Hp, Wp, K) */
typedef struct { const float* ws; float* out; long N, P, Q, K, Hp, Wp; } cv_out;

static void conv_copy_out(void* arg, int tid, int nthreads) {
    const cv_out* A = (const cv_out*)arg;
    const long rows = A->N * A->P;
    for (long rr = rows * tid / nthreads; rr < rows * (tid + 1) / nthreads; ++rr) {
        const long n = rr / A->P, p = rr % A->P;
        memcpy(A->out + rr * A->Q * A->K, A->ws + (n * A->Hp + p) * A->Wp * A->K,
               sizeof(float) * (size_t)(A->Q * A->K));
    }
}

/* col (M, R*S*C) = the patches of the output pixels, a filter row's S*C values one run where its taps lie
   inside the image row (dw = 1); rows split between threads */
typedef struct { const tr_job* J; float* col; long M, R; } cv_col;

static void conv_im2col(void* arg, int tid, int nthreads) {
    const cv_col* A = (const cv_col*)arg;
    const tr_job* J = A->J;
    const long C = J->C, SC = J->S * C, PQ = J->P * J->Q, i0 = A->M * tid / nthreads, i1 = A->M * (tid + 1) / nthreads;
    long nimg = i0 / PQ, oh = (i0 - nimg * PQ) / J->Q, ow = i0 - nimg * PQ - oh * J->Q;
    for (long i = i0; i < i1; ++i) {
        const long iw0 = ow * J->sw - J->pw;
        const float* xn = J->x + nimg * J->H * J->W * C;
        const int inside = J->dw == 1 && iw0 >= 0 && iw0 + J->S <= J->W;
        float* d = A->col + i * A->R * SC;
        for (long r = 0; r < A->R; ++r, d += SC) {
            const long h = oh * J->sh - J->ph + r * J->dh;
            if (h < 0 || h >= J->H) memset(d, 0, sizeof(float) * (size_t)SC);
            else if (inside) memcpy(d, xn + (h * J->W + iw0) * C, sizeof(float) * (size_t)SC);
            else for (long s = 0; s < J->S; ++s) {
                const long w = iw0 + s * J->dw;
                if (w < 0 || w >= J->W) memset(d + s * C, 0, sizeof(float) * (size_t)C);
                else memcpy(d + s * C, xn + (h * J->W + w) * C, sizeof(float) * (size_t)C);
            }
        }
        if (++ow == J->Q) { ow = 0; if (++oh == J->P) { oh = 0; ++nimg; } }
    }
}

#define IM2COL_MAX_BYTES ((size_t)16 << 20)  /* above: the patches gathered while packing instead */

static tr_buf tr_src_buf, tr_vout_buf, tr_col_buf;

/* a copy pass on the pool: all threads above 256 KiB */
static void conv_copy(tr_task fn, void* arg, size_t bytes, int threads) {
    const int t = bytes >= ((size_t)256 << 10) ? tr_pool_ensure(threads) : 1;
    tr_parallel(fn, arg, t);
}
"""

ENTRY = """
{prefix}int {entry}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    (void)fparams;
    tr_job J;
    memset(&J, 0, sizeof J);
    const float* x = (const float*)bufs[0];
    float* out = (float*)bufs[2];
    const long N = (long)dims[0], C = (long)dims[1], H = (long)dims[2], W = (long)dims[3], K = (long)dims[4];
    const long R = (long)dims[5], S = (long)dims[6], sh = (long)dims[7], sw = (long)dims[8];
    const long ph = (long)dims[9], pw = (long)dims[10], dh = (long)dims[11], dw = (long)dims[12];
    const long P = (H + 2 * ph - dh * (R - 1) - 1) / sh + 1, Q = (W + 2 * pw - dw * (S - 1) - 1) / sw + 1;
    const int threads = dims[14] > 0 ? (int)dims[14] : NTHREADS;
    const int plain = R == 1 && S == 1 && ph == 0 && pw == 0;
    if (dims[13] != 1) return 3;  /* not this path's shape */
    J.x = x; J.H = H; J.W = W; J.P = P; J.Q = Q; J.sh = sh; J.sw = sw; J.ph = ph; J.pw = pw;
    J.inplace = plain || (sh == 1 && sw == 1);
    J.b = (const float*)bufs[1]; J.ldb = C * R * S;
    J.bias = (const float*)bufs[3];
    J.alpha = 1.0f;
    J.C = C; J.S = S; J.dh = dh; J.dw = dw; J.lda = C;
    J.n = K; J.k = C * R * S;
    int rc = 0;
    pthread_mutex_lock(&tr_call_mu);
    if (!J.inplace) {{  /* a strided filter: the patches built once and read in place, output rows exact */
        J.m = N * P * Q;
        const size_t bytes = sizeof(float) * (size_t)J.m * (size_t)J.k;
        float* col = bytes <= IM2COL_MAX_BYTES ? (float*)tr_reserve(&tr_col_buf, bytes) : NULL;
        if (col) {{
            cv_col a = {{&J, col, J.m, R}};
            conv_copy(conv_im2col, &a, bytes, threads);
            J.src = col; J.C = J.k; J.S = 1; J.dh = 0; J.Wp = 0; J.lda = J.k; J.inplace = 1;
        }}
        J.c = out; J.out = out; J.ldc = K; J.ldo = K;
        rc = tr_gemm(&J, threads);
    }} else if (plain && sh == 1 && sw == 1) {{
        J.src = x; J.Wp = W; J.m = N * H * W;
        J.c = out; J.out = out; J.ldc = K; J.ldo = K;
        rc = tr_gemm(&J, threads);
    }} else {{
        /* a padded row is its left padding and its pixels: a tap past the right edge reads the next
           row's left padding, zeros as well, so the dropped columns are pw (not 2 pw) a row */
        const long Hd = plain ? P : H + 2 * ph, Wd = plain ? Q : W + pw;
        /* an output row longer than a virtual one (pw > (S - 1) dw: a 1-wide filter, say) spills into the next
           virtual row, its left padding: the last image's last row spills past the rows computed and the copy */
        const long over = Q > Wd ? Q - Wd : 0;
        /* slack: the dropped rows of the last image read up to one tap reach past the copy */
        const size_t slack = (size_t)((S - 1) * dw + (R - 1) * dh * Wd + over + MR) * (size_t)C;
        const size_t elems = (size_t)(N * Hd * Wd * C);
        float* src = (float*)tr_reserve(&tr_src_buf, sizeof(float) * (elems + slack));
        float* vout = plain ? out : (float*)tr_reserve(&tr_vout_buf, sizeof(float) * (size_t)((N * Hd * Wd + over) * K));
        if (!src || !vout) rc = 1;
        else {{
            cv_in in = {{x, src, N, H, W, C, Hd, Wd, plain ? sh : 1, plain ? sw : 1, ph, pw}};
            conv_copy(conv_copy_in, &in, sizeof(float) * elems, threads);
            memset(src + elems, 0, sizeof(float) * slack);
            J.src = src; J.Wp = Wd;
            J.m = plain ? N * P * Q : ((N - 1) * Hd + P) * Wd + over;
            J.c = vout; J.out = vout; J.ldc = K; J.ldo = K;
            rc = tr_gemm(&J, threads);
            if (rc == 0 && !plain) {{
                cv_out o = {{vout, out, N, P, Q, K, Hd, Wd}};
                conv_copy(conv_copy_out, &o, sizeof(float) * (size_t)(N * P * Q * K), threads);
            }}
        }}
    }}
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""


def unsupported(op: Any) -> str | None:
    """Why ``op`` cannot take this path or the small-M form (None: both can)."""
    if op.dtype.value != "fp32" or op.layout != "nhwc":
        return f"it reads fp32 NHWC inputs in place, not {op.dtype.value} {op.layout}"
    if op.groups != 1:
        return "it computes one group (groups = 1)"
    return None


def in_place(op: Any) -> bool:
    """Whether this path reads A in place (1x1 unpadded, or stride 1); else it gathers while packing."""
    return (op.r == 1 and op.s == 1 and tuple(op.padding) == (0, 0)) or tuple(op.stride) == (1, 1)


def check(op: Any, schedule: CpuSchedule) -> None:
    """pack_a off on a conv2d means this path, pack_b off its small-M form: the op must be one they compute."""
    if not schedule.pack_a and not schedule.pack_b:  # the direct small-channel form (conv_stem.py)
        from .conv_stem import refusal

        if why := refusal(op):
            raise BadInputError("pack_a: a conv2d reads both the input and the filter in place (pack_a and pack_b "
                                f"off) only in the direct small-channel form, and {why}",
                                "turn one of them on: the input (pack_a off) or the filter (pack_b off) in place")
        return
    if not schedule.pack_b and (why := unsupported(op)):
        raise BadInputError(f"pack_b: a conv2d reads its filter in place only in the small-M form, and {why}")
    if not schedule.pack_a and (why := unsupported(op)):
        raise BadInputError(f"pack_a: a conv2d reads A unpacked only on the direct path, and {why}")


def render_direct(op: Any, isa: CpuIsa, s: CpuSchedule, header: str, entry: str) -> str:
    from .pool import pool_c

    spec = CoreSpec(dtype="fp32", epilogue=("bias",) if op.bias else (), bias_axis="col", pack_a=PACK_A,
                    pack_b=PACK_B, job_fields=FIELDS, unpacked_a="row", unpacked_a_at="conv_a(J, i0, pc)",
                    helpers=HELPERS, unpacked_a_if="J->inplace",
                    segmented_a="conv_uk(J, i0, pc, kc, b, dst, ld, acc)")
    return "\n".join([header, isa.prelude(("fp32",)), pool_c(), f"#define NTHREADS {s.threads}",
                      render_core(isa, s, spec), COPIES,
                      ENTRY.format(prefix=isa.kernel_prefix, entry=entry)])
