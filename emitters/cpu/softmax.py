"""Row softmax, vectorised and numerically stable: a pass for the row maximum, a pass for exp(x - max)
(written to the output, or an fp32 scratch row for 16-bit types) and its sum, a pass that scales.
Rows are split between the pool's threads when the matrix is big enough to pay for them.

Entry: ``int tracea_softmax(void* const* bufs, const int64_t* dims, const double* fparams)`` with
bufs = {x, out}, dims = {rows, cols, threads}.
"""

from __future__ import annotations

from typing import Any

from .gemm_core import IN_CONVERT, VEC_SUFFIX
from .isa import CpuIsa
from .schedule import CpuSchedule

ENTRY = "tracea_softmax"


def render_softmax(op: Any, isa: CpuIsa, s: CpuSchedule, header: str) -> str:
    from .pool import pool_c

    dtype = op.dtype.value
    return "\n".join([header, isa.prelude((dtype,)), pool_c(), f"#define NTHREADS {s.threads}",
                      _rows(isa, dtype) + _entry(isa, dtype == "fp32")])


def _rows(isa: CpuIsa, dtype: str) -> str:
    """The job and the worker: each thread's rows, their maximum, exp and sum in fp32 (in the output row
    itself for fp32, else a scratch row), then the scaled row stored."""
    sfx = VEC_SUFFIX[dtype]
    conv = IN_CONVERT[dtype].format(x="xr[j]")
    in_t = isa.ctype(dtype)
    to_out = {"fp32": "{v}", "fp16": "tr_f2h({v})", "bf16": "tr_f2bf({v})"}[dtype]
    fp32 = dtype == "fp32"
    return f"""
typedef {in_t} in_t;
typedef struct {{ const in_t* x; in_t* out; long rows, cols; float* scratch; long scratch_stride; }} sm_job;

static void softmax_rows(void* arg, int tid, int nthreads) {{
    const sm_job* J = (const sm_job*)arg;
    const long r0 = J->rows * tid / nthreads, r1 = J->rows * (tid + 1) / nthreads;
    const long cols = J->cols, full = cols / VL * VL;
    float* e = J->scratch + tid * J->scratch_stride;
    (void)e;
    for (long r = r0; r < r1; ++r) {{
        const in_t* xr = J->x + r * cols;
        in_t* orow = J->out + r * cols;
        float* er = {"orow" if fp32 else "e"};
        vf vm = vf_set1(-INFINITY);
        for (long j = 0; j < full; j += VL) vm = vf_max(vm, vf_load{sfx}(xr + j));
        float m = vf_hmax(vm);
        for (long j = full; j < cols; ++j) {{ const float v = {conv}; m = v > m ? v : m; }}
        const vf vmax = vf_set1(m);
        vf vs = vf_zero();
        for (long j = 0; j < full; j += VL) {{
            const vf ev = vf_exp(vf_sub(vf_load{sfx}(xr + j), vmax));
            vf_store(er + j, ev);
            vs = vf_add(vs, ev);
        }}
        float sum = vf_hsum(vs);
        for (long j = full; j < cols; ++j) {{ const float ev = expf({conv} - m); er[j] = ev; sum += ev; }}
        const float inv = 1.0f / sum;
        const vf vinv = vf_set1(inv);
        for (long j = 0; j < full; j += VL) vf_store{sfx}(orow + j, vf_mul(vf_load(er + j), vinv));
        for (long j = full; j < cols; ++j) orow[j] = {to_out.format(v="er[j] * inv")};
    }}
}}
"""


def _entry(isa: CpuIsa, fp32: bool) -> str:
    """The entry point: the job, as many threads as the work pays for, the scratch rows (16-bit only)."""
    return f"""
static tr_buf tr_scratch_buf;

{isa.kernel_prefix}int {ENTRY}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    (void)fparams;
    sm_job J;
    J.x = (const in_t*)bufs[0];
    J.out = (in_t*)bufs[1];
    J.rows = (long)dims[0];
    J.cols = (long)dims[1];
    int t = dims[2] > 0 ? (int)dims[2] : NTHREADS;
    const double work = (double)J.rows * (double)J.cols;
    if ((double)t > 1.0 + work / 32768.0) t = (int)(1.0 + work / 32768.0);
    if ((long)t > J.rows) t = (int)J.rows;
    if (t < 1) t = 1;
    pthread_mutex_lock(&tr_call_mu);
    t = tr_pool_ensure(t);
    J.scratch_stride = {"0" if fp32 else "(J.cols + 15) / 16 * 16 + 16"};
    J.scratch = {"NULL" if fp32 else "(float*)tr_reserve(&tr_scratch_buf, sizeof(float) * (size_t)J.scratch_stride * (size_t)t)"};
    int rc = 0;
    if ({"0" if fp32 else "J.scratch == NULL"}) {{ rc = 1; tr_pool_release(); }}
    else tr_parallel(softmax_rows, &J, t);
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""


def core_arguments(op: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    return (op.rows, op.cols, 0), ()


def core_metadata(op: Any, isa: CpuIsa, s: CpuSchedule, name: str) -> dict[str, Any]:
    """DESIGN.md's kernel metadata (Tessera §11.2) of a row kernel: GPU-only resources are None."""
    dtype = op.dtype.value
    return {
        "name": name, "tile": {"M": 1, "N": isa.lanes, "K": None, "stages": 1},
        "fragments": {"mma": None, "dtype_in": dtype, "dtype_acc": "fp32", "vector": isa.vtype, "lanes": isa.lanes},
        "resources": {"regs_per_thread": None, "smem_per_cta": None, "packed_a_bytes": 0, "packed_b_bytes": 0,
                      "scratch_bytes_per_thread": 0 if dtype == "fp32" else 4 * op.cols},
        "launch": {"grid": None, "block": None, "threads": s.threads},
        "epilogue": [] if dtype == "fp32" else [f"round to {dtype}"],
    }
