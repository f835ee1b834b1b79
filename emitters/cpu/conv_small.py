"""NHWC fp32 convolution with few output pixels: the filter is read in place and the patches are packed.

Why: with fewer output pixels than output channels (ResNet-50's 14x14 and 7x7 stages at batch 1: 49 or
196 pixels against 256-2048 channels) the filter outweighs the input, and packing it (a transposition
of every filter element, each call) costs as much as the FMAs. Computed as out^T = W x patches^T, the
filter (OHWI: row k is contiguous in r, s, c) is the GEMM's A and the micro-kernel broadcasts it
straight from memory, streamed once; the patches (pixels x R*S*C, gathered with any stride, padding
and dilation) are the packed B. The sums land in a workspace (channels x pixels, bias per row) that is
transposed into the NHWC output.

Selected by ``pack_b=False`` on a conv2d schedule: the filter (the op's B) is not packed.
"""

from __future__ import annotations

from typing import Any

from .gemm_core import CoreSpec, render_core
from .isa import CpuIsa
from .schedule import CpuSchedule

COPY_OUT = """
/* out (pixels, K) = ws (K, pixels) transposed, in 16 x 16 blocks; pixel blocks split between threads */
typedef struct { const float* ws; float* out; long K, M; } cs_out;

static void conv_transpose_out(void* arg, int tid, int nthreads) {
    const cs_out* A = (const cs_out*)arg;
    const long blocks = (A->M + 15) / 16;
    for (long b = blocks * tid / nthreads; b < blocks * (tid + 1) / nthreads; ++b) {
        const long i0 = b * 16, i1 = i0 + 16 < A->M ? i0 + 16 : A->M;
        for (long k0 = 0; k0 < A->K; k0 += 16) {
            const long k1 = k0 + 16 < A->K ? k0 + 16 : A->K;
            for (long i = i0; i < i1; ++i)
                for (long k = k0; k < k1; ++k) A->out[i * A->K + k] = A->ws[k * A->M + i];
        }
    }
}

static tr_buf tr_wsT_buf;
"""

ENTRY = """
{prefix}int {entry}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    (void)fparams;
    tr_job J;
    memset(&J, 0, sizeof J);
    J.xg = (const in_t*)bufs[0];
    J.a = (const in_t*)bufs[1];
    float* out = (float*)bufs[2];
    J.bias = (const in_t*)bufs[3];
    J.N = (long)dims[0]; J.C = (long)dims[1]; J.H = (long)dims[2]; J.W = (long)dims[3];
    J.K = (long)dims[4]; J.R = (long)dims[5]; J.S = (long)dims[6];
    J.sh = (long)dims[7]; J.sw = (long)dims[8]; J.ph = (long)dims[9]; J.pw = (long)dims[10];
    J.dh = (long)dims[11]; J.dw = (long)dims[12]; J.G = (long)dims[13];
    if (J.G != 1) return 3;  /* not this path's shape */
    J.P = (J.H + 2 * J.ph - J.dh * (J.R - 1) - 1) / J.sh + 1;
    J.Q = (J.W + 2 * J.pw - J.dw * (J.S - 1) - 1) / J.sw + 1;
    J.Cg = J.C; J.Kg = J.K; J.Kdim = J.C * J.R * J.S;
    J.alpha = 1.0f;
    const int threads = dims[14] > 0 ? (int)dims[14] : NTHREADS;
    const long M = J.N * J.P * J.Q;
    J.m = J.K; J.n = M; J.k = J.Kdim; J.lda = J.Kdim;
    int rc = 0;
    pthread_mutex_lock(&tr_call_mu);
    float* ws = (float*)tr_reserve(&tr_wsT_buf, sizeof(float) * (size_t)(J.K * M));
    if (!ws) rc = 1;
    else {{
        J.c = ws; J.out = ws; J.ldc = M; J.ldo = M;
        rc = tr_gemm(&J, threads);
        if (rc == 0) {{
            cs_out o = {{ws, out, J.K, M}};
            const int t = J.K * M >= (256 << 10) / 4 ? tr_pool_ensure(threads) : 1;
            tr_parallel(conv_transpose_out, &o, t);
        }}
    }}
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""


def patches_pack(nhwc_pack_a: str) -> str:
    """The packed B: rows kk of the patches, columns the output pixels j0.. (the NHWC gather of conv.py,
    which packs the same patches as A, with the roles of rows and columns swapped)."""
    out = nhwc_pack_a
    for old, new in (("i0 + i", "j0 + i"), ("i < mr", "i < nr"), ("i = mr", "i = nr"), ("* MR + i", "* NR + i"),
                     ("i < MR", "i < NR")):
        out = out.replace(old, new)
    return out


def render_small(op: Any, isa: CpuIsa, s: CpuSchedule, header: str, entry: str, fields: str,
                 nhwc_pack_a: str, pack_a_row: str) -> str:
    import dataclasses

    from .pool import pool_c

    spec = CoreSpec(dtype="fp32", epilogue=("bias",) if op.bias else (), bias_axis="row", pack_a=pack_a_row,
                    pack_b=patches_pack(nhwc_pack_a), job_fields=fields, unpacked_a="row")
    # the core's A (the filter) read in place for full panels, its B (the patches) packed
    core = dataclasses.replace(s, pack_a=False, pack_b=True)
    return "\n".join([header, isa.prelude(("fp32",)), pool_c(), f"#define NTHREADS {s.threads}",
                      render_core(isa, core, spec), COPY_OUT, ENTRY.format(prefix=isa.kernel_prefix, entry=entry)])
