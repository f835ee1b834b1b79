"""GEMM on the shared core: packing for both layouts of A and B and every input type, and the entry.

Entry: ``int tracea_gemm(void* const* bufs, const int64_t* dims, const double* fparams)`` with
bufs = {a, b, out, bias, residual}, dims = {m, n, k, threads (0: the schedule's)}, fparams = {alpha}.
Shapes are runtime arguments, so one binary serves every shape of a (type, layouts, epilogue, schedule).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .gemm_core import VEC_SUFFIX, CoreSpec, blocked_metadata, render_core
from .gemv import prefers, render_small_m, small_m_metadata, small_m_schedule, small_m_space
from .isa import CpuIsa
from .schedule import FAMILY_REGISTERS, CpuSchedule
from .schedules import blocked_space, hero_schedule, thread_counts, valid_unique

ENTRY = "tracea_gemm"


def _pack_a(layout: str) -> str:
    if layout == "row":  # element (i, p) at a[i * lda + p]: rows are contiguous in k
        return """    const in_t* src = J->a + i0 * J->lda + p0;
    for (int i = 0; i < mr; ++i) {
        const in_t* s = src + i * J->lda;
        for (int p = 0; p < kc; ++p) dst[p * MR + i] = IN2F(s[p]);
    }
    for (int i = mr; i < MR; ++i)
        for (int p = 0; p < kc; ++p) dst[p * MR + i] = 0.0f;"""
    return """    const in_t* src = J->a + p0 * J->lda + i0;  /* element (i, p) at a[p * lda + i] */
    for (int p = 0; p < kc; ++p) {
        const in_t* s = src + p * J->lda;
        float* d = dst + p * MR;
        int i = 0;
        for (; i < mr; ++i) d[i] = IN2F(s[i]);
        for (; i < MR; ++i) d[i] = 0.0f;
    }"""


def _pack_b(layout: str, dtype: str) -> str:
    sfx = VEC_SUFFIX[dtype]
    if layout == "row":  # element (p, j) at b[p * ldb + j]: NR contiguous values per k step
        return f"""    const in_t* src = J->b + p0 * J->ldb + j0;
    if (nr == NR) {{
        for (int p = 0; p < kc; ++p)
            for (int j = 0; j < NR; j += VL) vf_store(dst + p * NR + j, vf_load{sfx}(src + p * J->ldb + j));
    }} else {{
        for (int p = 0; p < kc; ++p)
            for (int j = 0; j < NR; j += VL) {{
                const int n = nr - j;
                vf_store(dst + p * NR + j, n >= VL ? vf_load{sfx}(src + p * J->ldb + j)
                                          : n > 0 ? vf_load{sfx}_n(src + p * J->ldb + j, n) : vf_zero());
            }}
    }}"""
    return """    const in_t* src = J->b + j0 * J->ldb + p0;  /* element (p, j) at b[j * ldb + p] */
    for (int j = 0; j < nr; ++j) {
        const in_t* s = src + j * J->ldb;
        for (int p = 0; p < kc; ++p) dst[p * NR + j] = IN2F(s[p]);
    }
    for (int j = nr; j < NR; ++j)
        for (int p = 0; p < kc; ++p) dst[p * NR + j] = 0.0f;"""


def render_gemm(op: Any, isa: CpuIsa, s: CpuSchedule, header: str) -> str:
    from .pool import pool_c

    if s.small_m:
        return render_small_m(op, isa, s, ENTRY, header)
    dtype = op.dtype.value
    spec = CoreSpec(
        dtype=dtype, epilogue=tuple(op.epilogue), bias_axis="col",
        pack_a=_pack_a(op.layout_a), pack_b=_pack_b(op.layout_b, dtype),
        unpacked_a=op.layout_a if dtype == "fp32" else None,
        unpacked_b="row" if dtype == "fp32" and op.layout_b == "row" else None,
    )
    converts = dtype != "fp32"
    entry = f"""
{isa.kernel_prefix}int {ENTRY}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    tr_job J;
    memset(&J, 0, sizeof J);
    J.m = (long)dims[0]; J.n = (long)dims[1]; J.k = (long)dims[2];
    J.a = (const in_t*)bufs[0]; J.b = (const in_t*)bufs[1]; J.out = (out_t*)bufs[2];
    J.bias = (const in_t*)bufs[3]; J.res = (const in_t*)bufs[4];
    J.lda = {"J.k" if op.layout_a == "row" else "J.m"};
    J.ldb = {"J.n" if op.layout_b == "row" else "J.k"};
    J.ldo = J.n; J.ldr = J.n; J.ldc = J.n;
    J.alpha = (float)fparams[0];
    {"J.c = NULL;" if converts else "J.c = (float*)J.out;"}
    const int threads = dims[3] > 0 ? (int)dims[3] : NTHREADS;
    pthread_mutex_lock(&tr_call_mu);
    const int rc = tr_gemm(&J, threads);
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""
    return "\n".join([header, isa.prelude((dtype,)), pool_c(), f"#define NTHREADS {s.threads}",
                      render_core(isa, s, spec), entry])


def core_arguments(op: Any) -> tuple[tuple[int, ...], tuple[float, ...]]:
    return (op.m, op.n, op.k, 0), (op.alpha,)


def core_tag(op: Any) -> str:
    return f"{op.layout_a[0]}{op.layout_b[0]}" + "".join(f"_{e}" for e in op.epilogue)


# Up to this many multiply-adds (128^3, ~20 µs on one core) a GEMM runs on one thread and, in fp32, reads A
# and B in place: handing half of it to a second thread and packing operands that fit in L2 cost more than
# they save. Measured on a 2-core Zen 4 (AVX-512, 2026-11-28): 128^3 57.9 µs with 2 threads and packing,
# 20.6 µs without either; 64^3 5.2 -> 4.3 µs; 192^3 and up, both threads and packing win again.
SMALL_MACS = 128 ** 3


def _small_m_on(op: Any, family: str, host: Any) -> dict[str, Any]:
    """The small-M path's K chunk and block on an AMD AVX-512 host, row-major B: 8 rows a chunk (one row of A:
    4 vectors a block), where the Xeon the defaults were chosen on ran 32 rows and 8 vectors. A 2-core EPYC VM
    (2026-11-29, docs/cpu-runs/epyc-paired-rounds/small_m_chunks.txt, interleaved with NumPy): 1 x 4096 x 4096
    2.97 ms against 4.58 with the defaults (NumPy 2.52), 1 x 14336 x 4096 8.96 against 13.68 (8.93), 1 x 4096 x
    14336 9.60 against 13.71 (7.89), 16 x 4096 x 4096 8.78 against 12.64 (9.54). Not measured on other AMD
    chips or on Intel ones with these values."""
    cpu = getattr(host, "cpu", None)
    if family != "cpu-avx512" or op.layout_b != "row" or getattr(cpu, "vendor", None) != "AuthenticAMD":
        return {}
    lanes = FAMILY_REGISTERS["cpu-avx512"][0]
    return {"kc": 8, **({"shape": (1, 64 // lanes)} if op.m == 1 else {})}


def core_hero(op: Any, v: Any, host: Any) -> CpuSchedule:
    """The small-M path up to ``gemv.MAX_M`` rows (B streamed once, no packing), the blocked core above
    (one thread and, in fp32, no packing up to ``SMALL_MACS``)."""
    if prefers(op):
        return small_m_schedule(op, v.family, hero_schedule(op, v, host).threads, **_small_m_on(op, v.family, host))
    hero = hero_schedule(op, v, host)
    if op.m * op.n * op.k <= SMALL_MACS:
        fp32 = op.dtype.value == "fp32"
        hero = dataclasses.replace(hero, threads=1, pack_a=hero.pack_a and not fp32,
                                   pack_b=hero.pack_b and not (fp32 and op.layout_b == "row"))
    return hero


def core_space(op: Any, v: Any, host: Any) -> list[CpuSchedule]:
    blocked = blocked_space(op, v, host, (op.m, op.n, op.k))
    if not prefers(op):
        return blocked
    return valid_unique(op, v, host, [core_hero(op, v, host), *small_m_space(op, v.family, thread_counts(host)),
                                       *blocked])


def core_metadata(op: Any, isa: CpuIsa, s: CpuSchedule, name: str) -> dict[str, Any]:
    if s.small_m:
        return small_m_metadata(op, isa, s, name)
    return blocked_metadata(op, isa, s, name, list(op.epilogue), s.pack_a)
