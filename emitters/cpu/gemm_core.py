"""The shared BLIS-style GEMM core: register-blocked micro-kernels, tile stores with fused epilogues,
the cache-blocked macro loops and their threading. GEMM and the implicit-GEMM convolution plug into it
with their own packing routines (``CoreSpec``).

Loop nest (every thread runs it; work inside a phase is claimed, not assigned):

    for jc in N step NC:                    B panel   KC x NC  (L3, shared)
      for pc in K step KC:
        pack the B panel: chunks of micro-panels claimed by all threads; barrier
        claim units (an M block of MC rows x a chunk of N micro-panels):
          pack its A block                  A block   MC x KC  (L2, private)
          for jr in the chunk:              B micro-panel KC x NR (L1/L2)
            for ir in the block step MR:    MR x NR accumulators in registers
              micro-kernel; epilogue on the last K block
        barrier

Claiming keeps both cores busy when one of them is shared with another process (a thread that gets
half a core takes fewer units instead of holding the others at the barrier). Blocks are capped by the
schedule and balanced per call (K = 2048 with KC = 1024 runs as 2 x 1024, K = 1100 as 2 x 550). Edge
tiles run the same micro-kernel into a local tile. On AVX-512 a row's A element is broadcast once per
k step into a register shared by the row's FMAs when one is free; otherwise (one B vector, or no
register left) the broadcast is folded into the FMA (``vfmadd231ps mem{1to16}``).

Rendering: ``plan_core`` decides once what the text depends on (``CorePlan``: types, micro-kernel read
modes, registers); steps over the plan write the defines and job, the loaders (packing), the
micro-kernels (the main loop), the epilogue (``epilogue.C_SIMD``), the tiles, the workers and the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .isa import CpuIsa
from .schedule import CpuSchedule

IN_CONVERT = {"fp32": "{x}", "fp16": "tr_h2f({x})", "bf16": "tr_bf2f({x})"}
VEC_SUFFIX = {"fp32": "", "fp16": "_f16", "bf16": "_bf16"}


@dataclass(frozen=True)
class CoreSpec:
    """What an operation plugs into the core."""

    dtype: str  # fp32 | fp16 | bf16: inputs, bias, residual and output
    epilogue: tuple[str, ...]  # bias, relu, gelu, scale, residual, in order
    bias_axis: str = "col"  # "col": bias[j] (GEMM, NHWC conv); "row": bias[i] (NCHW conv as W x patches)
    pack_a: str = ""  # C body of pack_a(J, i0, mr, p0, kc, dst)
    pack_b: str = ""  # C body of pack_b(J, p0, kc, j0, nr, dst)
    job_fields: str = ""  # extra fields of tr_job the packing routines read
    unpacked_a: str | None = None  # "row" | "col": the micro-kernel may read A in place (fp32 only)
    unpacked_b: str | None = None  # "row": the micro-kernel may read B in place (fp32 only)
    helpers: str = ""  # C placed before the packing routines
    unpacked_a_at: str | None = None  # C expression of a full A panel's address at (i0, pc), read in place
    fixed_kc: bool = False  # the entry sets J->kc (K blocks that must not cross a boundary of the op's)
    unpacked_a_if: str | None = None  # C condition under which full A panels are read in place (else always)
    segmented_a: str | None = None  # C call that runs an in-place A panel's micro-kernel(s) given pc (tile's K start)


@dataclass(frozen=True)
class CorePlan:
    """Everything the core's text is derived from, decided once from (ISA, schedule, spec)."""

    isa: CpuIsa
    s: CpuSchedule
    spec: CoreSpec
    in_t: str  # C type of the inputs and the output
    converts: bool  # a 16-bit output: fp32 sums pass through a tile or a workspace
    has_epilogue: bool  # an epilogue function is emitted (ops to apply, or a conversion)
    amodes: tuple[str, ...]  # how micro-kernels read A: "packed", then the in-place layout if unpacked
    bmodes: tuple[str, ...]
    nv: int  # B vectors per k step (nr / lanes)
    bcast: bool  # the ISA folds a broadcast into the FMA
    reuse: bool  # a register is free to broadcast a row's A element once per k step

    @property
    def direct_a(self) -> bool:
        return len(self.amodes) > 1

    @property
    def direct_b(self) -> bool:
        return len(self.bmodes) > 1


def plan_core(isa: CpuIsa, s: CpuSchedule, spec: CoreSpec) -> CorePlan:
    """The plan of one core: the schedule's pack flags meet what the op can read in place."""
    converts = spec.dtype != "fp32"
    nv = s.nr // isa.lanes
    # With nv > 1 B vectors a row's A element feeds nv FMAs: a folded broadcast loads it nv times, so a
    # k step issues mr * nv + nv loads for mr * nv FMAs and the load ports, not the FMA units, set the
    # pace (measured on the CI machine's AVX-512 cores, 8 x 48: 89 % of NumPy). Broadcast once into a
    # register when one is free beside the accumulators and the B vectors: mr + nv loads per k step.
    return CorePlan(
        isa=isa, s=s, spec=spec, in_t=isa.ctype(spec.dtype), converts=converts,
        has_epilogue=bool(spec.epilogue) or converts,
        amodes=("packed",) + ((spec.unpacked_a,) if (not s.pack_a and spec.unpacked_a) else ()),
        bmodes=("packed",) + ((spec.unpacked_b,) if (not s.pack_b and spec.unpacked_b) else ()),
        nv=nv, bcast="fma_bcast" in isa.vec, reuse=s.mr * nv + nv + 1 <= isa.vregs)


def render_core(isa: CpuIsa, s: CpuSchedule, spec: CoreSpec) -> str:
    """Everything between the prelude and the operation's entry point: defines, the job, packing,
    micro-kernels, tiles, the threaded macro loops and ``tr_gemm(J, threads)``."""
    p = plan_core(isa, s, spec)
    kernels = [_ukernel(p, am, bm) for am in p.amodes for bm in p.bmodes]
    epilogue = [_epilogue(spec)] if p.has_epilogue else []
    return "\n".join([_defines(p), *_loaders(p), *kernels, *epilogue,
                      _tile(p) + _worker(p) + _driver(spec.fixed_kc)])


def _defines(p: CorePlan) -> str:
    """Block sizes, the input and output types and the job every thread reads."""
    return f"""
#define MR {p.s.mr}
#define NR {p.s.nr}
#define MC {p.s.mc}
#define KC {p.s.kc}
#define NC {p.s.nc}
#define IN2F(x) {IN_CONVERT[p.spec.dtype].format(x='(x)')}
typedef {p.in_t} in_t;
typedef {p.in_t} out_t;

typedef struct {{
    long m, n, k;
    const in_t* a; long lda;
    const in_t* b; long ldb;
    float* c; long ldc;        /* fp32 sums: the output itself for fp32, else a workspace */
    out_t* out; long ldo;      /* the output */
    const in_t* bias; const in_t* res; long ldr; float alpha;
    float* bpack; float* apack; long apack_stride;
    long mc, kc, nc;           /* this call's balanced blocks */
    long mblocks, nchunks;     /* units of work: M blocks x chunks of N micro-panels */
    atomic_long bclaim, uclaim;
    tr_barrier bar;
{p.spec.job_fields}
}} tr_job;
"""


def _loaders(p: CorePlan) -> list[str]:
    """The operation's helpers and its packing routines (the loaders: panels into fp32 micro-panels)."""
    spec = p.spec
    return [spec.helpers,
            f"static void pack_a(const tr_job* J, long i0, int mr, long p0, int kc, float* restrict dst) {{\n"
            f"{spec.pack_a}\n}}\n",
            f"static void pack_b(const tr_job* J, long p0, int kc, long j0, int nr, float* restrict dst) {{\n"
            f"{spec.pack_b}\n}}\n"]


def _a_at(p: CorePlan, amode: str, u: int, i: int) -> str:
    mr = p.s.mr
    return {"packed": f"a[{u * mr + i}]", "row": f"a[{i} * lda + {u}]", "col": f"a[{u} * lda + {i}]"}[amode]


def _b_at(p: CorePlan, bmode: str, u: int, j: int) -> str:
    return {"packed": f"b + {u * p.s.nr + j * p.isa.lanes}", "row": f"b + {u} * ldb + {j * p.isa.lanes}"}[bmode]


def _advance(p: CorePlan, amode: str, bmode: str, u: int) -> str:
    da = {"packed": f"a += {u * p.s.mr};", "row": f"a += {u};", "col": f"a += {u} * lda;"}[amode]
    db = {"packed": f"b += {u * p.s.nr};", "row": f"b += {u} * ldb;"}[bmode]
    return f"{da} {db}"


def _k_step(p: CorePlan, amode: str, bmode: str, u: int, indent: str) -> list[str]:
    """One k step of the micro-kernel: nv B vectors, then mr rows of FMAs against a broadcast of A."""
    nv = p.nv
    out = [f"{indent}{{"]
    for j in range(nv):
        out.append(f"{indent}    const vf b{j} = vf_load({_b_at(p, bmode, u, j)});")
    for i in range(p.s.mr):
        a = _a_at(p, amode, u, i)
        if nv == 1 or (p.bcast and not p.reuse):
            out.append(f"{indent}    " + " ".join(f"c{i}_{j} = vf_fma_bcast(&{a}, b{j}, c{i}_{j});"
                                                 for j in range(nv)))
        else:
            ai = f"vf_bcast(&{a})" if p.bcast else f"vf_set1({a})"
            out.append(f"{indent}    {{ const vf ai = {ai}; "
                       + " ".join(f"c{i}_{j} = vf_fma(ai, b{j}, c{i}_{j});" for j in range(nv)) + " }")
    out.append(f"{indent}}}")
    return out


def _ukernel(p: CorePlan, amode: str, bmode: str) -> str:
    """One micro-kernel (the main loop): C[MR x NR] (+)= A-panel x B-panel over kc steps, accumulators
    in registers."""
    mr, nr, nv, vl, unroll, pf = p.s.mr, p.s.nr, p.nv, p.isa.lanes, p.s.unroll, p.s.prefetch
    lines = [f"static void __attribute__((noinline)) ukernel_{amode}_{bmode}(int kc, const float* restrict a, long lda, "
             "const float* restrict b, long ldb, float* restrict c, long ldc, int accumulate) {",
             "    (void)lda; (void)ldb;"]
    for i in range(mr):
        lines.append("    vf " + ", ".join(f"c{i}_{j} = vf_zero()" for j in range(nv)) + ";")
    # the C tile is read (or written) once the loop ends: start bringing its lines in now
    lines += [f"    __builtin_prefetch(c + {i} * ldc + {off}, 1, 3);" for i in range(mr) for off in range(0, nr, 16)]
    lines.append("    int k = 0;")
    lines.append(f"    for (; k + {unroll} <= kc; k += {unroll}) {{")
    if pf:
        # one prefetch per 64-byte line the loop will need pf steps from now
        if amode == "packed":
            lines += [f"        __builtin_prefetch(a + {pf * mr + off}, 0, 3);" for off in range(0, unroll * mr, 16)]
        if bmode == "packed":
            lines += [f"        __builtin_prefetch(b + {pf * nr + off}, 0, 3);" for off in range(0, unroll * nr, 16)]
    for u in range(unroll):
        lines += _k_step(p, amode, bmode, u, "        ")
    lines += [f"        {_advance(p, amode, bmode, unroll)}", "    }", "    for (; k < kc; ++k) {"]
    lines += _k_step(p, amode, bmode, 0, "        ")
    lines += [f"        {_advance(p, amode, bmode, 1)}", "    }", "    if (accumulate) {"]
    for i in range(mr):
        lines.append("        " + " ".join(
            f"vf_store(c + {i} * ldc + {j * vl}, vf_add(vf_load(c + {i} * ldc + {j * vl}), c{i}_{j}));"
            for j in range(nv)))
    lines.append("    } else {")
    for i in range(mr):
        lines.append("        " + " ".join(f"vf_store(c + {i} * ldc + {j * vl}, c{i}_{j});" for j in range(nv)))
    lines += ["    }", "}"]
    return "\n".join(lines) + "\n"


def _epilogue(spec: CoreSpec) -> str:
    """Apply the epilogue to an mr x nr tile of fp32 sums at src and write the output type."""
    from .epilogue import C_SIMD, statements  # the vocabulary lives in tracea.kernels, which loads NumPy

    sfx = VEC_SUFFIX[spec.dtype]
    conv = IN_CONVERT[spec.dtype]
    ops = statements(spec.epilogue, C_SIMD, bias="brow" if spec.bias_axis == "row" else "ld_in(J->bias + gj, n)",
                     residual="ld_in(J->res + gi * J->ldr + gj, n)")
    brow = conv.format(x="J->bias[gi]")
    return f"""
static inline vf ld_in(const in_t* p, int n) {{ return n == VL ? vf_load{sfx}(p) : vf_load{sfx}_n(p, n); }}
static inline void st_out(out_t* p, vf v, int n) {{ if (n == VL) vf_store{sfx}(p, v); else vf_store{sfx}_n(p, v, n); }}
static void epilogue(const tr_job* J, const float* src, long lds, long i0, long j0, int mr, int nr) {{
    const vf valpha = vf_set1(J->alpha);
    (void)valpha;
    for (int i = 0; i < mr; ++i) {{
        const long gi = i0 + i;
        {"const vf brow = vf_set1(" + brow + ");" if "bias" in spec.epilogue and spec.bias_axis == "row" else ""}
        out_t* orow = J->out + gi * J->ldo;
        for (int j = 0; j < nr; j += VL) {{
            const int n = nr - j < VL ? nr - j : VL;
            const long gj = j0 + j;
            vf v = n == VL ? vf_load(src + i * lds + j) : vf_load_n(src + i * lds + j, n);
            {" ".join(ops)}
            st_out(orow + gj, v, n);
        }}
    }}
}}
"""


def _tile(p: CorePlan) -> str:
    """A tile: the micro-kernel into C (or a local tile merged into it at the edges), the epilogue on
    the last K block."""
    return f"""
/* sums of a partial tile (computed into t, ld NR) into C */
static void merge(float* c, long ldc, const float* t, int mr, int nr, int accumulate) {{
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr; j += VL) {{
            const int n = nr - j < VL ? nr - j : VL;
            vf v = vf_load(t + i * NR + j);
            if (accumulate) v = vf_add(v, vf_load_n(c + i * ldc + j, n));
            vf_store_n(c + i * ldc + j, v, n);
        }}
}}

static void tile(const tr_job* J, const float* a, long lda, const float* b, long ldb, int amode, int bmode,
                 int kc, long i0, long j0, int mr, int nr, int first, int last{", long pc" if p.spec.segmented_a else ""}) {{
    float* c = J->c ? J->c + i0 * J->ldc + j0 : NULL;
    float t[MR * NR] __attribute__((aligned(64)));
    (void)amode; (void)bmode;
#define TR_UK(dst, ld, acc) {_dispatch(p.amodes, p.bmodes, p.spec.segmented_a)}
    if ({"first && last" if p.converts else "0"}) {{
        /* one K block and a converted output: the sums never leave this tile */
        TR_UK(t, NR, 0);
        {"epilogue(J, t, NR, i0, j0, mr, nr);" if p.has_epilogue else ""}
        return;
    }}
    if (mr == MR && nr == NR) {{
        TR_UK(c, J->ldc, !first);
    }} else {{
        TR_UK(t, NR, 0);
        merge(c, J->ldc, t, mr, nr, !first);
    }}
    {"if (last) epilogue(J, c, J->ldc, i0, j0, mr, nr);" if p.has_epilogue else "(void)last;"}
#undef TR_UK
}}
"""


def _worker(p: CorePlan) -> str:
    """The threaded macro loops: B panels packed by all threads, units of (A block x chunk of B
    micro-panels) claimed, tiles over them."""
    return f"""
/* Work is claimed, not assigned: a thread that runs slower (a core shared with another process)
   takes fewer units instead of holding everyone up. Each thread's last claim of a phase fails exactly
   once, so every thread can compute where the next phase's claims start (base += units + nthreads). */
static inline long tr_claim(atomic_long* counter) {{ return atomic_fetch_add_explicit(counter, 1, memory_order_relaxed); }}

#define BPACK_CHUNK 4

static void gemm_worker(void* arg, int tid, int nthreads) {{
    tr_job* J = (tr_job*)arg;
    float* ap = J->apack + tid * J->apack_stride;
    int sense = 0;
    long bbase = 0, ubase = 0;
    for (long jc = 0; jc < J->n; jc += J->nc) {{
        const long nc = tr_min(J->nc, J->n - jc);
        const long npanels = tr_cdiv(nc, NR);
        const long nchunks = tr_min(J->nchunks, npanels);
        const long bchunks = tr_cdiv(npanels, BPACK_CHUNK);
        const long units = J->mblocks * nchunks;
        for (long pc = 0; pc < J->k; pc += J->kc) {{
            const int kc = (int)tr_min(J->kc, J->k - pc);
            const int first = pc == 0, last = pc + kc >= J->k;
{_pack_b_phase(p)}
{_tile_units(p)}
            ubase += units + nthreads;
            if (nthreads > 1) tr_barrier_wait(&J->bar, &sense);
        }}
    }}
}}
"""


def _pack_b_phase(p: CorePlan) -> str:
    """The worker's first phase of a (jc, pc) step: the B panels packed by all threads, chunk by chunk,
    then a barrier (full panels of a direct B are read in place)."""
    return f"""            for (;;) {{
                const long u = tr_claim(&J->bclaim) - bbase;
                if (u >= bchunks) break;
                for (long q = u * BPACK_CHUNK; q < tr_min(npanels, (u + 1) * BPACK_CHUNK); ++q) {{
                    const int nr = (int)tr_min(NR, nc - q * NR);
                    {"if (nr == NR) continue;  /* full panels are read in place */" if p.direct_b else ""}
                    pack_b(J, pc, kc, jc + q * NR, nr, J->bpack + q * NR * kc);
                }}
            }}
            bbase += bchunks + nthreads;
            if (nthreads > 1) tr_barrier_wait(&J->bar, &sense);"""


def _tile_units(p: CorePlan) -> str:
    """The second phase: units of (A block x chunk of B micro-panels) claimed, the A block packed once per
    unit run, the micro-kernel tiles over the chunk."""
    return f"""            long packed_mb = -1;
            for (;;) {{
                const long u = tr_claim(&J->uclaim) - ubase;
                if (u >= units) break;
                const long mb = u / nchunks, ch = u % nchunks;
                const long ic = mb * J->mc, mc = tr_min(J->mc, J->m - ic);
                const int apanels = (int)tr_cdiv(mc, MR);
                if (mb != packed_mb) {{
                    for (int r = 0; r < apanels; ++r) {{
                        const int mr = (int)tr_min(MR, mc - (long)r * MR);
                        {_skip_a(p.spec) if p.direct_a else ""}
                        pack_a(J, ic + (long)r * MR, mr, pc, kc, ap + (long)r * MR * kc);
                    }}
                    packed_mb = mb;
                }}
                for (long q = npanels * ch / nchunks; q < npanels * (ch + 1) / nchunks; ++q) {{
                    const long j0 = jc + q * NR;
                    const int nr = (int)tr_min(NR, nc - q * NR);
                    const float* bp = J->bpack + q * NR * kc;
                    long ldb = NR;
                    int bmode = 0;
                    {_direct_b(p.spec) if p.direct_b else ""}
                    for (int r = 0; r < apanels; ++r) {{
                        const long i0 = ic + (long)r * MR;
                        const int mr = (int)tr_min(MR, mc - (long)r * MR);
                        const float* apn = ap + (long)r * MR * kc;
                        long lda = MR;
                        int amode = 0;
                        {_direct_a(p.spec) if p.direct_a else ""}
                        tile(J, apn, lda, bp, ldb, amode, bmode, kc, i0, j0, mr, nr, first, last{", pc" if p.spec.segmented_a else ""});
                    }}
                }}
            }}"""


def _driver(fixed_kc: bool = False) -> str:
    """``tr_gemm(J, threads)``: this call's balanced blocks, threads, units and buffers; then the workers."""
    text = """
static tr_buf tr_bpack_buf, tr_apack_buf, tr_ws_buf;

/* Blocks, buffers and threads for J (operands and output set by the caller); 0 or an error code. */
static int tr_gemm(tr_job* J, int max_threads) {
    if (J->m <= 0 || J->n <= 0 || J->k <= 0) return 0;
    J->kc = tr_balanced(J->k, KC, 1);
    J->nc = tr_balanced(J->n, NC, NR);
    /* threads: one per ~4 MFLOP at most, and no more than there are tiles */
    const double flops = 2.0 * (double)J->m * (double)J->n * (double)J->k;
    int t = max_threads;
    if ((double)t > 1.0 + flops / 4e6) t = (int)(1.0 + flops / 4e6);
    const long mpanels = tr_cdiv(J->m, MR), npanels = tr_cdiv(J->nc, NR);
    if ((long)t > mpanels * npanels) t = (int)(mpanels * npanels);
    if (t < 1) t = 1;
    t = tr_pool_ensure(t);
    /* units of work: M blocks of up to MC rows, at least ~4 per thread (down to 4 MR panels a block);
       if M is too short for that, the N micro-panels are split into chunks as well */
    long mcb = tr_balanced(J->m, MC, MR);
    const long want = 4L * t;
    if (t > 1 && tr_cdiv(J->m, mcb) < want) {
        long target = tr_cdiv(tr_cdiv(J->m, want), MR) * MR;
        if (target < 4 * MR) target = 4 * MR;
        if (target < mcb) mcb = tr_balanced(J->m, target, MR);
    }
    J->mc = mcb;
    J->mblocks = tr_cdiv(J->m, mcb);
    J->nchunks = t > 1 && J->mblocks < want ? tr_min(npanels, tr_cdiv(want, J->mblocks)) : 1;
    J->bpack = (float*)tr_reserve(&tr_bpack_buf, sizeof(float) * (size_t)J->kc * (size_t)(npanels * NR));
    J->apack_stride = (J->mc * J->kc + 15) / 16 * 16 + 16;  /* separate cache lines per thread */
    J->apack = (float*)tr_reserve(&tr_apack_buf, sizeof(float) * (size_t)J->apack_stride * (size_t)t);
    if (!J->bpack || !J->apack) { tr_pool_release(); return 1; }
    if (J->c == NULL && J->k > J->kc) {
        /* a converted output over several K blocks keeps its fp32 sums in a workspace */
        J->ldc = J->n;
        J->c = (float*)tr_reserve(&tr_ws_buf, sizeof(float) * (size_t)J->m * (size_t)J->n);
        if (!J->c) { tr_pool_release(); return 1; }
    }
    atomic_store(&J->bclaim, 0);
    atomic_store(&J->uclaim, 0);
    tr_barrier_init(&J->bar, t);
    tr_parallel(gemm_worker, J, t);
    tr_barrier_destroy(&J->bar);
    return 0;
}
"""
    return text.replace("J->kc = tr_balanced(J->k, KC, 1);", "if (J->kc <= 0) J->kc = tr_balanced(J->k, KC, 1);") \
        if fixed_kc else text


def blocked_metadata(op: Any, isa: CpuIsa, s: CpuSchedule, name: str, epilogue: list[str],
                     packs_a: bool) -> dict[str, Any]:
    """DESIGN.md's kernel metadata (Tessera §11.2) of a kernel on this core: GPU-only resources are None.
    ``epilogue`` names the op's fused steps; ``packs_a``: whether A is packed (a gather always is)."""
    dtype = op.dtype.value
    if dtype != "fp32":
        epilogue.append(f"round to {dtype}")
    return {
        "name": name,
        "tile": {"M": s.mr, "N": s.nr, "K": s.kc, "stages": 1},
        "blocks": {"MC": s.mc, "KC": s.kc, "NC": s.nc},
        "fragments": {"mma": isa.mma, "dtype_in": dtype, "dtype_acc": "fp32", "vector": isa.vtype,
                      "lanes": isa.lanes, "accumulators": s.mr * s.nr // isa.lanes},
        "resources": {"regs_per_thread": None, "smem_per_cta": None,
                      "vector_registers": s.mr * s.nr // isa.lanes + s.nr // isa.lanes + 1,
                      "packed_a_bytes": 4 * s.mc * s.kc if packs_a else 0,
                      "packed_b_bytes": 4 * s.kc * s.nc,
                      "packed_a_bytes_total": 4 * s.mc * s.kc * s.threads},
        "launch": {"grid": None, "block": None, "threads": s.threads},
        "unroll": s.unroll, "prefetch": s.prefetch, "pack": {"a": s.pack_a, "b": s.pack_b},
        "epilogue": epilogue,
    }


def _dispatch(amodes: tuple[str, ...], bmodes: tuple[str, ...], segmented: str | None = None) -> str:
    if len(amodes) == 1 and len(bmodes) == 1:
        return "ukernel_packed_packed(kc, a, lda, b, ldb, dst, ld, acc)"
    branches = []
    for ai, am in enumerate(amodes):
        for bi, bm in enumerate(bmodes):
            call = segmented if segmented and ai == 1 else f"ukernel_{am}_{bm}(kc, a, lda, b, ldb, dst, ld, acc)"
            branches.append(f"if (amode == {ai} && bmode == {bi}) {call};")
    return " else ".join(branches)


def _full_a(spec: CoreSpec) -> str:
    return "mr == MR" + (f" && {spec.unpacked_a_if}" if spec.unpacked_a_if else "")


def _skip_a(spec: CoreSpec) -> str:
    return f"if ({_full_a(spec)}) continue;  /* full panels are read in place */"


def _direct_a(spec: CoreSpec) -> str:
    off = "i0 * J->lda + pc" if spec.unpacked_a == "row" else "pc * J->lda + i0"
    at = spec.unpacked_a_at or f"(const float*)J->a + {off}"
    return f"if ({_full_a(spec)}) {{ apn = {at}; lda = J->lda; amode = 1; }}"


def _direct_b(spec: CoreSpec) -> str:
    return "if (nr == NR) { bp = (const float*)J->b + pc * J->ldb + j0; ldb = J->ldb; bmode = 1; }"
