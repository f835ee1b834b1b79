"""NHWC fp32 convolution over few input channels (ResNet-50's stem: 3 channels, 7x7, stride 2): a direct
micro-kernel that reads the input where it lies, so no patch is gathered, copied or packed.

Why: with C < 16 a filter row's S*C values are a short run, and the GEMM forms either gather every patch
element into a packed panel or copy the patches out first (7.4 MB for the stem at batch 1, as large as the
arithmetic's own time on a 2-core VM: 0.75x oneDNN there). Here an output tile is ``mr`` pixels of one output
row by ``nr`` channels in registers; for each filter row r and each of its S*C values j, ``nr / VL`` filter
vectors are loaded once and each of the ``mr`` pixels broadcasts its input value (pixel p's run starts
``p * sw * C`` values after pixel 0's), one FMA a vector. The input is copied once into a zero-padded image wide
enough for the last tile's overrun past Q (computed from whatever lies there, never stored): no edge case in the
loop; the filter, OHWI, is
repacked once a call to [r][s*C + c][K rounded up to nr] (the stem's 37 KB) with zero channels past K.

Selected by ``pack_a=False`` and ``pack_b=False`` on a conv2d schedule (neither operand packed), where
``refusal`` is None. ``mr`` and ``nr`` are the micro-kernel's, ``threads`` the pool's; the blocking fields
are unused.
"""

from __future__ import annotations

from typing import Any

from .isa import CpuIsa
from .schedule import FAMILY_REGISTERS, CpuSchedule

MAX_CHANNELS = 15  # the form's input channels: below conv.SMALL_CHANNELS
MAX_MR = 8


def refusal(op: Any) -> str | None:
    """Why the direct small-channel form cannot compute ``op`` (None: it can)."""
    if getattr(op, "kind", None) != "conv2d":
        return "it computes conv2d only"
    if op.layout != "nhwc":
        return "it computes NHWC only"
    if op.dtype.value != "fp32":
        return f"it computes fp32 only, not {op.dtype.value}"
    if op.groups != 1:
        return f"it computes groups = 1 only, not {op.groups}"
    if tuple(op.dilation) != (1, 1):
        return "it computes undilated filters only"
    if op.c > MAX_CHANNELS:
        return f"it reads runs of S*C values for C <= {MAX_CHANNELS}, not C = {op.c}"
    return None


def tile(family: str, k: int) -> tuple[int, int]:
    """(mr, nr): a channel block of at most 64 (a multiple of the family's lanes) whose mr x nr accumulators,
    nr/VL filter vectors and one broadcast fit the vector registers (mr <= 8), with the most useful FMAs a
    filter load: mr x nr/VL, times the share of the blocks' channels that are K's (AVX-512, K = 64: 6 x 64;
    AVX2: 6 x 16, where 4 x 24 would leave a third of its last block empty)."""
    lanes, vregs = FAMILY_REGISTERS[family]
    best, score = (1, lanes), 0.0
    for nr in range(lanes, 64 + 1, lanes):
        nv = nr // lanes
        mr = min(MAX_MR, (vregs - nv - 1) // nv)
        if mr < 1:
            break
        useful = mr * nv * k / (-(-k // nr) * nr)
        if useful > score + 1e-9:
            best, score = (mr, nr), useful
    return best


KERNEL = r"""
/* The direct small-channel conv (emitters/cpu/conv_stem.py). */
#define MR @MR@
#define NR @NR@
#define NV (NR / VL)
typedef struct { const float* img; const float* w; const float* bias; float* out;
                 long N, Hp, Wp, C, K, Kp, R, S, P, Q, sh, sw; } st_job;

/* MR pixels from (oh, ow0) of one image by NR channels from k0: the sums over every tap, then np of them stored */
static void st_tile(const st_job* J, const float* img, float* out, long oh, long ow0, int np, long k0) {
    vf acc[MR][NV];
    for (int p = 0; p < MR; ++p)
        for (int v = 0; v < NV; ++v) acc[p][v] = vf_zero();
    const long SC = J->S * J->C, step = J->sw * J->C;
    for (long r = 0; r < J->R; ++r) {
        const float* row = img + ((oh * J->sh + r) * J->Wp + ow0 * J->sw) * J->C;
        const float* wr = J->w + r * SC * J->Kp + k0;
        for (long j = 0; j < SC; ++j) {
            vf w[NV];
            for (int v = 0; v < NV; ++v) w[v] = vf_load(wr + j * J->Kp + v * VL);
            for (int p = 0; p < MR; ++p) {
                const vf a = vf_bcast(row + p * step + j);
                for (int v = 0; v < NV; ++v) acc[p][v] = vf_fma(a, w[v], acc[p][v]);
            }
        }
    }
    for (int p = 0; p < np; ++p) {
        float* o = out + p * J->K + k0;
        for (int v = 0; v < NV; ++v) {
            const long k = k0 + v * VL;
            if (k >= J->K) break;
            vf x = acc[p][v];
            if (J->bias) x = vf_add(x, vf_load(J->bias + k));
            if (k + VL <= J->K) vf_store(o + v * VL, x);
            else vf_store_n(o + v * VL, x, (int)(J->K - k));
        }
    }
}

/* the (image, output row) pairs split between threads; each row's channel blocks, then its pixel tiles */
static void st_work(void* arg, int tid, int nthreads) {
    const st_job* J = (const st_job*)arg;
    const long rows = J->N * J->P;
    for (long rr = rows * tid / nthreads; rr < rows * (tid + 1) / nthreads; ++rr) {
        const long n = rr / J->P, oh = rr % J->P;
        const float* img = J->img + n * J->Hp * J->Wp * J->C;
        float* orow = J->out + rr * J->Q * J->K;
        for (long k0 = 0; k0 < J->K; k0 += NR)
            for (long ow = 0; ow < J->Q; ow += MR)
                st_tile(J, img, orow + ow * J->K, oh, ow, (int)(J->Q - ow < MR ? J->Q - ow : MR), k0);
    }
}

/* the zero-padded image: row hp of image n is input row hp - ph, columns shifted by pw (cut at Wp) */
typedef struct { const float* x; float* img; long N, H, W, C, Hp, Wp, ph, pw; } st_pad;

static void st_pad_rows(void* arg, int tid, int nthreads) {
    const st_pad* A = (const st_pad*)arg;
    const long rows = A->N * A->Hp;
    for (long rr = rows * tid / nthreads; rr < rows * (tid + 1) / nthreads; ++rr) {
        const long n = rr / A->Hp, ih = rr % A->Hp - A->ph;
        float* d = A->img + rr * A->Wp * A->C;
        memset(d, 0, sizeof(float) * (size_t)(A->Wp * A->C));
        if (ih < 0 || ih >= A->H) continue;
        const long w1 = A->W < A->Wp - A->pw ? A->W : A->Wp - A->pw;
        if (w1 > 0) memcpy(d + A->pw * A->C, A->x + ((n * A->H + ih) * A->W) * A->C, sizeof(float) * (size_t)(w1 * A->C));
    }
}

static tr_buf st_img_buf, st_w_buf, st_bias_buf;

@PREFIX@int @ENTRY@(void* const* bufs, const int64_t* dims, const double* fparams) {
    (void)fparams;
    const float* x = (const float*)bufs[0];
    const float* wt = (const float*)bufs[1];
    const float* bias = (const float*)bufs[3];
    st_job J;
    memset(&J, 0, sizeof J);
    J.out = (float*)bufs[2];
    J.N = (long)dims[0]; J.C = (long)dims[1];
    const long H = (long)dims[2], W = (long)dims[3];
    J.K = (long)dims[4]; J.R = (long)dims[5]; J.S = (long)dims[6];
    J.sh = (long)dims[7]; J.sw = (long)dims[8];
    const long ph = (long)dims[9], pw = (long)dims[10];
    if (dims[11] != 1 || dims[12] != 1 || dims[13] != 1) return 3;  /* not this form's shape */
    J.P = (H + 2 * ph - J.R) / J.sh + 1;
    J.Q = (W + 2 * pw - J.S) / J.sw + 1;
    J.Kp = (J.K + NR - 1) / NR * NR;
    J.Hp = (J.P - 1) * J.sh + J.R;
    J.Wp = ((J.Q + MR - 1) / MR * MR - 1) * J.sw + J.S;  /* room for the last tile's overrun (never stored) */
    const int threads = dims[14] > 0 ? (int)dims[14] : NTHREADS;
    int rc = 0;
    pthread_mutex_lock(&tr_call_mu);
    float* img = (float*)tr_reserve(&st_img_buf, sizeof(float) * (size_t)(J.N * J.Hp * J.Wp * J.C));
    float* w = (float*)tr_reserve(&st_w_buf, sizeof(float) * (size_t)(J.R * J.S * J.C * J.Kp));
    float* b = bias ? (float*)tr_reserve(&st_bias_buf, sizeof(float) * (size_t)J.Kp) : NULL;
    if (!img || !w || (bias && !b)) rc = 1;
    else {
        const long SC = J.S * J.C;
        for (long r = 0; r < J.R; ++r)  /* OHWI -> [r][s*C + c][Kp], zero past K */
            for (long j = 0; j < SC; ++j)
                for (long k = 0; k < J.Kp; ++k)
                    w[(r * SC + j) * J.Kp + k] = k < J.K ? wt[(k * J.R + r) * SC + j] : 0.0f;
        if (b) {
            for (long k = 0; k < J.Kp; ++k) b[k] = k < J.K ? bias[k] : 0.0f;
        }
        st_pad P = {x, img, J.N, H, W, J.C, J.Hp, J.Wp, ph, pw};
        const int t = tr_pool_ensure(threads);
        tr_parallel(st_pad_rows, &P, J.N * J.Hp * J.Wp * J.C >= (64 << 10) ? t : 1);
        J.img = img; J.w = w; J.bias = b;
        tr_parallel(st_work, &J, t);
    }
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}
"""


def render_stem(op: Any, isa: CpuIsa, s: CpuSchedule, header: str, entry: str) -> str:
    from .pool import pool_c

    body = KERNEL.replace("@MR@", str(s.mr)).replace("@NR@", str(s.nr))
    body = body.replace("@PREFIX@", isa.kernel_prefix).replace("@ENTRY@", entry)
    return "\n".join([header, isa.prelude(("fp32",)), pool_c(), f"#define NTHREADS {s.threads}", body])
