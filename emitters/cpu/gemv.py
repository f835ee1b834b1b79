"""The small-M GEMM path (decode, M <= 32): no packing, B streamed from memory once, a schedule choice
of the GEMM core (``CpuSchedule.small_m``).

Row-major B ``[k, n]``: a thread claims a range of columns; for each k it loads a vector segment of B's
row and FMAs it into the accumulators of up to ``mr`` rows x ``nr / lanes`` vectors held in registers
(rows in groups of at most ``mr``, a K chunk of ``kc`` rows at a time so that a group's B block is
re-read from cache, not memory, and the next chunk adds into C). Col-major B ``[n, k]``: dot products
along k, ``nr / lanes`` columns x up to ``mr`` rows at once, horizontal sums at the end of a K chunk.
Threads split N; when N has fewer column blocks than twice the threads, they split K as well into
fp32 partial sums reduced after a barrier. The epilogue (``epilogue.C_SIMD``, through the GEMM core's)
runs once on each finished range of columns. 16-bit A is converted once into an fp32 copy; 16-bit B
converts as it loads.

Schedule fields read: mr (rows per register group), nr (columns per block: vectors x lanes; col-major B:
columns per group x lanes), kc (the K chunk), unroll (k steps), prefetch (row-major B: lines of the
column block ``prefetch`` blocks to the right; col-major B: ``prefetch`` x 4 lines ahead), threads.
"""

from __future__ import annotations

from typing import Any

from tracea.kernels import DType

from .gemm_core import IN_CONVERT, VEC_SUFFIX, CoreSpec, _epilogue
from .isa import CpuIsa
from .schedule import FAMILY_REGISTERS, CpuSchedule

# The hero is this path up to here. CI machine (AVX-512, 2 cores), 2026-11-25, ms median of 5-8, small-M /
# blocked core / NumPy: 16 x 4096 x 4096 3.26 / 7.15 / 5.48; 32 rows 5.18 / 8.56 / 7.16; 32 x 11008 x 4096
# 19.3 / 30.7 / 23.1; 32 x 4096 x 14336 21.8 / 34.5 / 33.3; col-major B 32 x 4096 x 4096 6.19 / 16.2 / 8.81;
# 48 rows still ahead of the blocked core (8.53 / 10.27 / 8.82) but no longer of NumPy; 64: 11.3 / 12.1 / 10.1.
MAX_M = 32


def _lines(nelems: int, dtype: str) -> range:
    """Element offsets of the 64-byte lines that ``nelems`` consecutive elements cover."""
    return range(0, nelems, max(1, 64 // DType(dtype).itemsize))


def _row_kernel(isa: CpuIsa, s: CpuSchedule, dtype: str, r: int, tail: bool) -> str:
    """r rows x nv vectors of C (+)= A[r, kb:ke] B[kb:ke, block] (row-major B); ``tail``: one vector of
    n <= VL columns, masked."""
    sfx = VEC_SUFFIX[dtype]
    nv = 1 if tail else s.nr // isa.lanes
    vl = isa.lanes
    fold = "fma_bcast" in isa.vec and (nv == 1 or r * nv + nv + 1 > isa.vregs)
    name = f"rowt_{r}" if tail else f"rowk_{r}"
    lines = [f"static void __attribute__((noinline)) {name}(long kb, long ke, const float* restrict a, long sai, "
             "long sak, const in_t* restrict b, long ldb, float* restrict c, long ldc, int accumulate, int n) {"]
    head = len(lines)
    for i in range(r):
        lines.append("    vf " + ", ".join(f"c{i}_{j} = vf_zero()" for j in range(nv)) + ";")
    lines += ["    const in_t* bp = b + kb * ldb;", "    const float* ap = a + kb * sak;", "    long k = kb;"]
    load = (f"(n == VL ? vf_load{sfx}({{p}}) : vf_load{sfx}_n({{p}}, n))" if tail else f"vf_load{sfx}({{p}})")

    def step(u: int, ind: str) -> list[str]:
        out = [f"{ind}{{"]
        for j in range(nv):
            out.append(f"{ind}    const vf b{j} = " + load.format(p=f"bp + {u} * ldb + {j * vl}") + ";")
        for i in range(r):
            a = f"ap[{u} * sak + {i} * sai]"
            if fold:
                out.append(f"{ind}    " + " ".join(f"c{i}_{j} = vf_fma_bcast(&{a}, b{j}, c{i}_{j});" for j in range(nv)))
            else:
                ai = f"vf_bcast(&{a})" if "bcast" in isa.vec else f"vf_set1({a})"
                out.append(f"{ind}    {{ const vf ai = {ai}; "
                           + " ".join(f"c{i}_{j} = vf_fma(ai, b{j}, c{i}_{j});" for j in range(nv)) + " }")
        out.append(f"{ind}}}")
        return out

    u_n = s.unroll
    lines.append(f"    for (; k + {u_n} <= ke; k += {u_n}) {{")
    if s.prefetch and not tail:
        lines += [f"        __builtin_prefetch(bp + {u} * ldb + {s.prefetch * s.nr + off}, 0, 3);"
                  for u in range(u_n) for off in _lines(nv * vl, dtype)]
    for u in range(u_n):
        lines += step(u, "        ")
    lines += [f"        bp += {u_n} * ldb; ap += {u_n} * sak;", "    }", "    for (; k < ke; ++k) {"]
    lines += step(0, "        ")
    lines += ["        bp += ldb; ap += sak;", "    }"]
    for i in range(r):
        for j in range(nv):
            dst = f"c + {i} * ldc + {j * vl}"
            if tail:
                lines.append(f"    vf_store_n({dst}, accumulate ? vf_add(vf_load_n({dst}, n), c{i}_{j}) : c{i}_{j}, n);")
            else:
                lines.append(f"    vf_store({dst}, accumulate ? vf_add(vf_load({dst}), c{i}_{j}) : c{i}_{j});")
    if not tail:  # n blocks side by side: each B row is read in one run across them, not NR columns at a time
        lines[head:] = ["    for (int q = 0; q < n; ++q, b += NR, c += NR) {"] + ["    " + x for x in lines[head:]] + ["    }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _col_kernel(isa: CpuIsa, s: CpuSchedule, dtype: str, r: int) -> str:
    """r rows x nc <= NCOL columns of C (+)= A[r, kb:ke] . B[cols, kb:ke] (col-major B, A fp32 rows):
    vector dot products along k, horizontal sums at the end; columns past nc repeat the last one."""
    sfx = VEC_SUFFIX[dtype]
    cols = s.nr // isa.lanes
    vl = isa.lanes
    lines = [f"static void __attribute__((noinline)) colk_{r}(long kb, long ke, const float* restrict a, long lda, "
             "const in_t* restrict b, long ldb, float* restrict c, long ldc, int accumulate, int nc) {"]
    for j in range(cols):
        lines.append(f"    const in_t* b{j} = b + ({j} < nc ? {j} : nc - 1) * ldb;")
    for i in range(r):
        lines.append("    vf " + ", ".join(f"c{i}_{j} = vf_zero()" for j in range(cols)) + ";")
    lines.append("    long k = kb;")

    def step(off: str, ind: str, masked: bool) -> list[str]:
        ldb_ = (lambda p: f"vf_load{sfx}_n({p}, n)") if masked else (lambda p: f"vf_load{sfx}({p})")
        lda_ = (lambda p: f"vf_load_n({p}, n)") if masked else (lambda p: f"vf_load({p})")
        out = [f"{ind}{{"]
        out += [f"{ind}    const vf v{j} = {ldb_(f'b{j} + k + {off}')};" for j in range(cols)]
        for i in range(r):
            out.append(f"{ind}    {{ const vf ai = {lda_(f'a + {i} * lda + k + {off}')}; "
                       + " ".join(f"c{i}_{j} = vf_fma(ai, v{j}, c{i}_{j});" for j in range(cols)) + " }")
        out.append(f"{ind}}}")
        return out

    u_n = s.unroll
    lines.append(f"    for (; k + {u_n * vl} <= ke; k += {u_n * vl}) {{")
    if s.prefetch:
        dist = s.prefetch * 4 * (64 // DType(dtype).itemsize)
        lines += [f"        __builtin_prefetch(b{j} + k + {dist + off}, 0, 0);"
                  for j in range(cols) for off in _lines(u_n * vl, dtype)]
    for u in range(u_n):
        lines += step(str(u * vl), "        ", False)
    lines += ["    }", f"    for (; k + {vl} <= ke; k += {vl})"]
    lines += step("0", "        ", False)
    lines += ["    if (k < ke) {", "        const int n = (int)(ke - k);"]
    lines += step("0", "        ", True)
    lines.append("    }")
    for i in range(r):
        for j in range(cols):
            lines.append(f"    if ({j} < nc) {{ const float t = vf_hsum(c{i}_{j}); "
                         f"c[{i} * ldc + {j}] = accumulate ? c[{i} * ldc + {j}] + t : t; }}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _unit(layout_b: str) -> str:
    """One unit of work: columns [j0, j1) over K rows [kb, ke) into the fp32 sums c, K chunk by K chunk
    (row-major B: each group's kernel runs across all the unit's full blocks, so a B row is read in one run)."""
    groups = """    const long groups = tr_cdiv(J->m, SM_R), base = J->m / groups, extra = J->m % groups;"""
    if layout_b == "row":
        return f"""
static void sm_unit(const tr_job* J, long j0, long j1, long kb, long ke, float* c) {{
{groups}
    for (long k0 = kb; k0 < ke; k0 += KC) {{
        const long k1 = tr_min(ke, k0 + KC);
        const int acc = k0 > kb;
        const long nb = (j1 - j0) / NR, jt = j0 + nb * NR;
        long i0 = 0;
        for (long g = 0; g < groups; ++g) {{
            const int r = (int)(base + (g < extra));
            const float* a = J->a + i0 * J->sai;
            float* cg = c + i0 * J->ldc;
            if (nb) ROWK[r](k0, k1, a, J->sai, J->sak, J->b + j0, J->ldb, cg + j0, J->ldc, acc, (int)nb);
            for (long v = jt; v < j1; v += VL)
                ROWT[r](k0, k1, a, J->sai, J->sak, J->b + v, J->ldb, cg + v, J->ldc, acc, (int)tr_min(VL, j1 - v));
            i0 += r;
        }}
    }}
}}
"""
    return f"""
static void sm_unit(const tr_job* J, long j0, long j1, long kb, long ke, float* c) {{
{groups}
    for (long j = j0; j < j1; j += NCOL) {{
        const int nc = (int)tr_min(NCOL, j1 - j);
        for (long k0 = kb; k0 < ke; k0 += KC) {{
            const long k1 = tr_min(ke, k0 + KC);
            long i0 = 0;
            for (long g = 0; g < groups; ++g) {{
                const int r = (int)(base + (g < extra));
                COLK[r](k0, k1, J->a + i0 * J->sai, J->sai, J->b + j * J->ldb, J->ldb, c + i0 * J->ldc + j, J->ldc,
                        k0 > kb, nc);
                i0 += r;
            }}
        }}
    }}
}}
"""


def _worker(has_epilogue: bool) -> str:
    epi = "epilogue(J, J->c + j0, J->ldc, 0, j0, (int)J->m, (int)(j1 - j0));" if has_epilogue else ""
    return f"""
static inline long tr_claim(atomic_long* counter) {{ return atomic_fetch_add_explicit(counter, 1, memory_order_relaxed); }}

/* Units (a range of columns x a part of K) are claimed, not assigned: a thread on a shared core takes
   fewer. With K split, the parts' partial sums are added after a barrier, a range of columns at a time. */
static void sm_worker(void* arg, int tid, int nthreads) {{
    tr_job* J = (tr_job*)arg;
    (void)tid;
    for (;;) {{
        const long u = tr_claim(&J->claim);
        if (u >= J->cunits * J->kparts) break;
        const long cu = u % J->cunits, p = u / J->cunits;
        const long j0 = cu * J->ucols, j1 = tr_min(J->n, j0 + J->ucols);
        const long kb = p * J->kstep, ke = tr_min(J->k, kb + J->kstep);
        sm_unit(J, j0, j1, kb, ke, p == 0 ? J->c : J->part + (p - 1) * J->m * J->n);
        if (J->kparts == 1) {{ {epi} }}
    }}
    if (J->kparts == 1) return;
    int sense = 0;
    if (nthreads > 1) tr_barrier_wait(&J->bar, &sense);
    for (;;) {{
        const long cu = tr_claim(&J->claim2);
        if (cu >= J->cunits) break;
        const long j0 = cu * J->ucols, j1 = tr_min(J->n, j0 + J->ucols);
        for (long i = 0; i < J->m; ++i)
            for (long p = 1; p < J->kparts; ++p) {{
                const float* src = J->part + (p - 1) * J->m * J->n + i * J->n;
                float* dst = J->c + i * J->ldc;
                for (long j = j0; j < j1; ++j) dst[j] += src[j];
            }}
        {epi}
    }}
}}
"""


def _driver(p_convert_a: str, group: str) -> str:
    return f"""
static tr_buf sm_ws_buf, sm_part_buf;

static int tr_gemm_small(tr_job* J, const in_t* a, int max_threads) {{
    if (J->m <= 0 || J->n <= 0 || J->k <= 0) return 0;
    {p_convert_a}
    const double flops = 2.0 * (double)J->m * (double)J->n * (double)J->k;
    int t = max_threads;
    if ((double)t > 1.0 + flops / 4e6) t = (int)(1.0 + flops / 4e6);
    if (t < 1) t = 1;
    t = tr_pool_ensure(t);
    const long blocks = tr_cdiv(J->n, {group});
    J->kparts = 1;
    if (t > 1 && blocks < 2L * t && J->k >= 512L * t) J->kparts = t;  /* N too narrow: split K too */
    J->kstep = tr_cdiv(tr_cdiv(J->k, J->kparts), 16) * 16;
    J->kparts = tr_cdiv(J->k, J->kstep);
    /* one range of whole blocks per thread: the longest runs of each B row (at 1 row x 4096 x 4096 on the
       CI machine, 1.25-1.3 ms against 1.35-1.45 ms with 4 ranges a thread and 1.8-3.4 ms with 16) */
    const long per = J->kparts > 1 ? 1 : tr_cdiv(blocks, (long)t);
    J->ucols = per * {group};
    J->cunits = tr_cdiv(J->n, J->ucols);
    if (J->c == NULL) {{
        J->ldc = J->n;
        J->c = (float*)tr_reserve(&sm_ws_buf, sizeof(float) * (size_t)J->m * (size_t)J->n);
        if (!J->c) {{ tr_pool_release(); return 1; }}
    }}
    if (J->kparts > 1) {{
        J->part = (float*)tr_reserve(&sm_part_buf, sizeof(float) * (size_t)(J->kparts - 1) * (size_t)J->m * (size_t)J->n);
        if (!J->part) {{ tr_pool_release(); return 1; }}
    }}
    atomic_store(&J->claim, 0);
    atomic_store(&J->claim2, 0);
    tr_barrier_init(&J->bar, t);
    tr_parallel(sm_worker, J, t);
    tr_barrier_destroy(&J->bar);
    return 0;
}}
"""


def _convert_a(op: Any) -> str:
    """A as fp32 with strides (sai, sak): in place when it is fp32 and the kernels can read its layout,
    else converted once into a row-major fp32 copy."""
    in_place = op.dtype.value == "fp32" and (op.layout_b == "row" or op.layout_a == "row")
    lda = "J->k" if op.layout_a == "row" else "J->m"
    if in_place:
        si, sk = ("J->k", "1") if op.layout_a == "row" else ("1", "J->m")
        return f"J->a = (const float*)a; J->sai = {si}; J->sak = {sk};"
    at = "a[i * lda + p]" if op.layout_a == "row" else "a[p * lda + i]"
    return f"""{{
        static tr_buf sm_a_buf;  /* kept between calls, like the other buffers */
        float* af = (float*)tr_reserve(&sm_a_buf, sizeof(float) * (size_t)J->m * (size_t)J->k);
        if (!af) return 1;
        const long lda = {lda};
        for (long i = 0; i < J->m; ++i)
            for (long p = 0; p < J->k; ++p) af[i * J->k + p] = IN2F({at});
        J->a = af; J->sai = J->k; J->sak = 1;
    }}"""


def render_small_m(op: Any, isa: CpuIsa, s: CpuSchedule, entry: str, header: str) -> str:
    """The whole translation unit of a small-M GEMM kernel (the same entry and arguments as the blocked
    core's)."""
    from .pool import pool_c

    dtype = op.dtype.value
    spec = CoreSpec(dtype=dtype, epilogue=tuple(op.epilogue))
    has_epilogue = bool(op.epilogue) or dtype != "fp32"
    row = op.layout_b == "row"
    rows = range(1, s.mr + 1)
    if row:
        kernels = [_row_kernel(isa, s, dtype, r, t) for r in rows for t in (False, True)]
        table = "\n".join(
            f"static void (*const {t}[])(long, long, const float*, long, long, const in_t*, long, float*, long, int, "
            f"int) = {{NULL, {', '.join(f'{t.lower()}_{r}' for r in rows)}}};" for t in ("ROWK", "ROWT"))
    else:
        kernels = [_col_kernel(isa, s, dtype, r) for r in rows]
        table = ("static void (*const COLK[])(long, long, const float*, long, const in_t*, long, float*, long, int, "
                 f"int) = {{NULL, {', '.join(f'colk_{r}' for r in rows)}}};")
    return "\n".join([header, isa.prelude((dtype,)), pool_c(), f"#define NTHREADS {s.threads}",
                      _defines(isa, s, dtype), *kernels, table, *([_epilogue(spec)] if has_epilogue else []),
                      _unit(op.layout_b), _worker(has_epilogue), _driver(_convert_a(op), "NR" if row else "NCOL"),
                      _entry(isa, entry, row, dtype)])


def _defines(isa: CpuIsa, s: CpuSchedule, dtype: str) -> str:
    """The tile constants, the element types and the job the threads share."""
    return f"""
#define SM_R {s.mr}
#define NR {s.nr}
#define NCOL {s.nr // isa.lanes}
#define KC {s.kc}
#define IN2F(x) {IN_CONVERT[dtype].format(x='(x)')}
typedef {isa.ctype(dtype)} in_t;
typedef {isa.ctype(dtype)} out_t;

typedef struct {{
    long m, n, k;
    const float* a; long sai, sak;  /* fp32 A: element (i, p) at a[i * sai + p * sak] */
    const in_t* b; long ldb;
    float* c; long ldc;             /* fp32 sums: the output itself for fp32, else a workspace */
    out_t* out; long ldo;
    const in_t* bias; const in_t* res; long ldr; float alpha;
    float* part;                    /* K split: part p > 0's sums at part + (p - 1) * m * n */
    long kparts, kstep, ucols, cunits;
    atomic_long claim, claim2;
    tr_barrier bar;
}} tr_job;
"""


def _entry(isa: CpuIsa, entry: str, row: bool, dtype: str) -> str:
    """The entry point: the job from the buffers and dims, ``tr_gemm_small`` under the call lock."""
    return f"""
{isa.kernel_prefix}int {entry}(void* const* bufs, const int64_t* dims, const double* fparams) {{
    tr_job J;
    memset(&J, 0, sizeof J);
    J.m = (long)dims[0]; J.n = (long)dims[1]; J.k = (long)dims[2];
    J.b = (const in_t*)bufs[1]; J.out = (out_t*)bufs[2];
    J.bias = (const in_t*)bufs[3]; J.res = (const in_t*)bufs[4];
    J.ldb = {"J.n" if row else "J.k"};
    J.ldo = J.n; J.ldr = J.n; J.ldc = J.n;
    J.alpha = (float)fparams[0];
    {"J.c = (float*)J.out;" if dtype == "fp32" else "J.c = NULL;"}
    const int threads = dims[3] > 0 ? (int)dims[3] : NTHREADS;
    pthread_mutex_lock(&tr_call_mu);
    const int rc = tr_gemm_small(&J, (const in_t*)bufs[0], threads);
    pthread_mutex_unlock(&tr_call_mu);
    return rc;
}}
"""


def _shape(family: str, m: int, layout_b: str) -> tuple[int, int]:
    """(rows per register group, vectors per block) for m rows: row-major B keeps m x nv accumulators
    (nv up to 4) and the B vectors in registers; col-major B a square-ish r x c block of dot products."""
    lanes, vregs = FAMILY_REGISTERS[family]
    if layout_b == "row":
        # at most 8 rows a group: 16 rows run as 2 x (8 x 3 vectors) on AVX-512, the second group re-reading
        # the K chunk's B block from cache (2.3-3.5 ms against 3.1-4.3 ms for one 16 x 1 group at 16 x 4096 x
        # 4096 on the CI machine, best of 30)
        # one row: 8 vectors a block (1 x 4096 x 4096 1.13 ms against 1.16 with 4, NumPy 1.11-1.13; 1 x 11008 x
        # 4096 4.27 against 4.62, NumPy 4.65)
        nv = max(1, min(8 if m == 1 else 4, (vregs - 2) // (min(m, 8) + 1)))
        return max(1, min(m, (vregs - nv - 1) // nv, 8)), nv
    r = max(1, min(m, 4))
    return r, max(1, min(8, (vregs - 1) // (r + 1)))


def small_m_schedule(op: Any, family: str, threads: int, shape: tuple[int, int] | None = None,
                     **fields: int) -> CpuSchedule:
    lanes, _ = FAMILY_REGISTERS[family]
    r, nv = shape or _shape(family, op.m, op.layout_b)
    row = op.layout_b == "row"
    # row-major B, K chunks of 32 rows (CI machine, OPENBLAS_THREAD_TIMEOUT=12 as the bench runs NumPy, best of
    # 15-20): 16 x 4096 x 4096 2.85 ms (kc 16: 3.24, kc 8: 4.43; NumPy 5.75); 1 x 4096 x 4096 1.27 ms (kc 16:
    # 1.24, kc 8: 1.37; NumPy 1.27); 1 x 4096 x 14336 kc 16 6.1-6.4 ms, kc 64 6.4-7.0 (NumPy 6.5-6.8)
    kc = fields.pop("kc", 32 if row else 1024)
    base = dict(unroll=4 if row else 2, prefetch=0)
    base.update(fields)
    return CpuSchedule(mr=r, nr=nv * lanes, mc=r, kc=kc, nc=nv * lanes, threads=threads, small_m=True, **base)


def prefers(op: Any) -> bool:
    """The hero rule: the small-M path for a GEMM of at most ``MAX_M`` rows."""
    return getattr(op, "kind", None) == "gemm" and op.m <= MAX_M


def small_m_space(op: Any, family: str, threads: list[int]) -> list[CpuSchedule]:
    """The small-M candidates: register shapes around the heuristic's, K chunks, unrolls, prefetch."""
    r0, nv0 = _shape(family, op.m, op.layout_b)
    shapes = {(r0, nv0)}
    for nv in (1, 2, 3, 4, 6, 8):
        lanes, vregs = FAMILY_REGISTERS[family]
        r = max(1, min(op.m, (vregs - nv - 1) // nv, 32))
        shapes.add((r, nv))
    out = []
    for shape in sorted(shapes):
        for kc in (8, 16, 32, 64, 256, 1024):
            for u in (1, 2, 4):
                for pf in (0, 2, 8):
                    for t in threads:
                        out.append(small_m_schedule(op, family, t, shape, kc=kc, unroll=u, prefetch=pf))
    return out


def small_m_metadata(op: Any, isa: CpuIsa, s: CpuSchedule, name: str) -> dict[str, Any]:
    dtype = op.dtype.value
    epilogue = list(op.epilogue) + ([f"round to {dtype}"] if dtype != "fp32" else [])
    vectors = s.nr // isa.lanes
    return {
        "name": name, "path": "small-m",
        "tile": {"M": s.mr, "N": s.nr, "K": s.kc, "stages": 1},
        "blocks": {"MC": s.mr, "KC": s.kc, "NC": s.nr},
        "fragments": {"mma": isa.mma, "dtype_in": dtype, "dtype_acc": "fp32", "vector": isa.vtype,
                      "lanes": isa.lanes, "accumulators": s.mr * vectors},
        "resources": {"regs_per_thread": None, "smem_per_cta": None, "vector_registers": s.mr * vectors + vectors + 1,
                      "packed_a_bytes": 0, "packed_b_bytes": 0, "packed_a_bytes_total": 0},
        "launch": {"grid": None, "block": None, "threads": s.threads},
        "unroll": s.unroll, "prefetch": s.prefetch, "pack": {"a": False, "b": False},
        "epilogue": epilogue,
    }


__all__ = ["MAX_M", "prefers", "render_small_m", "small_m_metadata", "small_m_schedule", "small_m_space"]
