"""The Hopper GEMM (``cuda-wgmma.gemm``, sm_90a): TMA loads into 128B-swizzled shared memory,
``wgmma.mma_async`` on warpgroups, producer/consumer warp specialisation over an mbarrier ring,
``setmaxnreg`` register reallocation, a persistent grid walking an L2-friendly tile order, the IR's
fused epilogues and any M, N, K.

One block is ``1 + consumers`` warpgroups. Warpgroup 0 is the producer: it gives registers back
(``setmaxnreg.dec``) and one of its threads issues the TMA copies of each k step into the next free
stage of the ring (wait ``empty[s]``, ``arrive.expect_tx`` on ``full[s]``, copy). The consumer
warpgroups take registers (``setmaxnreg.inc``), wait ``full[s]``, issue ``bk / 16`` wgmma per m64 slice
they own, keep one wgmma group in flight and release the stage before it (one arrive per warp on
``empty[s]``). Both sides walk the same tile sequence (one block, or pair, per SM; ``tile += clusters``),
so the producer runs into the next tile while the consumers are in their epilogue.

Shared memory per stage: the A tile (``bm`` x 64 elements) and the B tile (``bn`` x 64), each a stack
of 128-byte-swizzled 1024-byte atoms: ``TileLayout`` values with ``TmaSwizzle("128B")`` from
``emitters/layout.py`` (``operand_layouts``), the same layouts the bank simulator scores. The stage
size, the 1024-byte base alignment and the wgmma descriptors' strides (SBO = 8 lines, LBO = one
64-element atom column for MN-major operands) are read off those layouts, not written twice.

An operand whose global layout has k contiguous is "K-major" (one TMA box ``{64, rows}``); otherwise
"MN-major" (``rows / 64`` boxes of ``{64, 64}``) and the wgmma transposes it (``imm-trans`` = 1; bf16
and fp16 only, which is all this variant computes). Out-of-bounds boxes are zero-filled by TMA, so
any M, N, K is right; the epilogue clips (TMA store) or predicates (direct stores). TMA needs each
global row to start on a 16-byte boundary: a row stride that is not a multiple of 8 elements (K = 4097
row-major A) cannot be described, and ``tma_unsupported`` says so (the host, ``tma.py``, then copies
the operand into a padded-stride buffer at every launch, inside the timed region).

``store="tma"`` (the hero): the epilogue stages C through two 64 x 64 shared-memory atoms per consumer
laid out as the 128B swizzle (``TileLayout.c_offset``) and writes them with bulk tensor stores, instead
of 4-byte register stores that keep the tensor cores waiting (H200: 0.89x -> 0.96x cuBLAS at 4096^3).

``pingpong``: the two consumer warpgroups take alternate whole tiles instead of halves of one, so
one's epilogue runs under the other's mainloop (CUTLASS's "ping-pong" kernel); turn barriers keep their
mainloops in order.

``cluster`` = 2: the blocks run in pairs (``__cluster_dims__(2, 1, 1)``) over pairs of tiles that share
their B panel (tile rows 2i and 2i+1 of one tile column). Each block loads its own A and one half of B,
multicast by TMA into both blocks' shared memory; a stage is free again only when the consumers of both
blocks have released it (each consumer warp arrives on its own and on the peer's ``empty[s]``). The
pair starts and ends with a cluster barrier so neither block's barriers or shared memory are used
before they exist or after the block exits.
"""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import BadInputError

from ..cstyle import CodeWriter
from ..layout import TileLayout
from .epilogue import CUDA, statements
from .hopper.schedule import (  # noqa: F401 - re-read here until the kernel moves into hopper/
    ADDRESS_REGS,
    BK,
    C_ATOM_BYTES,
    ELEM_BYTES,
    HERO,
    PTX_TYPE,
    SMEM_OPTIN_SM90,
    SWIZZLE,
    WgmmaSchedule,
    hero_schedule,
    keep_valid,
    search_space,
)
from .render import CudaRenderer

KERNEL_NAME = "tr_wgmma_gemm"



# ---------------------------------------------------------------------------------------- layouts


def operand_kmajor(op: Any, which: str) -> bool:
    """Operand ``which`` ("a" or "b") has k contiguous in global memory."""
    return op.layout_a == "row" if which == "a" else op.layout_b == "col"


def operand_layouts(rows: int, kmajor: bool) -> list[TileLayout]:
    """The shared-memory atoms of one operand tile (``rows`` of the m or n extent by 64 k) in one stage,
    as TMA writes them with the 128B swizzle. K-major: one ``rows x 64`` row-major layout (a line per
    m/n row, 128 bytes of k). MN-major: ``rows / 64`` atoms of ``64 (k) x 64 (m/n)``, a line per k."""
    if kmajor:
        return [TileLayout(rows, BK, ELEM_BYTES, "row", swizzle=SWIZZLE)]
    atom = BK * 64 * ELEM_BYTES
    return [TileLayout(BK, 64, ELEM_BYTES, "row", swizzle=SWIZZLE, base_bytes=i * atom) for i in range(rows // 64)]


def descriptor_strides(layouts: list[TileLayout]) -> tuple[int, int]:
    """(LBO, SBO) in bytes of the wgmma shared-memory descriptor for an operand stored as ``layouts``.
    SBO: from one group of 8 lines to the next (8 x the line pitch: one swizzle period). LBO: for an
    MN-major operand, from one 64-element atom column to the next; unused by K-major swizzled ones."""
    first = layouts[0]
    sbo = 8 * first.pitch_bytes
    if sbo != SWIZZLE.period_bytes:
        raise BadInputError(f"a {first.describe()} tile is not made of 8-line 128B swizzle atoms")
    lbo = layouts[1].base_bytes - first.base_bytes if len(layouts) > 1 else first.size_bytes
    return lbo, sbo


def tma_unsupported(op: Any) -> str | None:
    """Why TMA cannot describe ``op``'s operands as they are (None: it can)."""
    if op.dtype.value not in PTX_TYPE:
        return f"cuda-wgmma takes bf16 or fp16 inputs, not {op.dtype.value}"
    for which, (_rows, inner) in (("A", op.shapes()["a"]), ("B", op.shapes()["b"])):
        if (inner * ELEM_BYTES) % 16:
            return (f"{which}'s rows are {inner} elements ({inner * ELEM_BYTES} B) apart; TMA needs a multiple of "
                    "16 B (pad the row stride to a multiple of 8 elements)")
    return None


# ---------------------------------------------------------------------------------------- rendering

DEVICE_LIB = r"""struct __align__(64) TrTensorMap { uint64_t opaque[16]; };

static __device__ __forceinline__ void tr_mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count));
}
static __device__ __forceinline__ void tr_mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nTR_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra TR_WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
static __device__ __forceinline__ void tr_mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
static __device__ __forceinline__ void tr_mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void tr_tma_load_2d(uint32_t dst, const TrTensorMap* map, int c0, int c1,
                                                      uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
static __device__ __forceinline__ void tr_tma_load_2d_mc(uint32_t dst, const TrTensorMap* map, int c0, int c1,
                                                         uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
/* Arrive on the mbarrier at the same shared-memory offset in block ``rank`` of this cluster. */
static __device__ __forceinline__ void tr_mbar_arrive_remote(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" :: "r"(remote) : "memory");
}
static __device__ __forceinline__ void tr_tma_store_2d(const TrTensorMap* map, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(src) : "memory");
}
static __device__ __forceinline__ void tr_prefetch_map(const TrTensorMap* map) {
    asm volatile("prefetch.tensormap [%0];\n" :: "l"((uint64_t)map) : "memory");
}
/* wgmma shared-memory descriptor: start, LBO, SBO in 16-byte units; layout type 1 = 128B swizzle. */
static __device__ __forceinline__ uint64_t tr_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo & 0x3FFFF) >> 4) << 16)
         | ((uint64_t)((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}
#define TR_WGMMA_FENCE() asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory")
#define TR_WGMMA_COMMIT() asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory")
#define TR_WGMMA_WAIT(n) asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(n) : "memory")
"""


def _wgmma_function(bn: int, ptx_type: str, trans_a: int, trans_b: int) -> str:
    """``tr_wgmma(float* d, descA, descB)``: one m64n{bn}k16 wgmma accumulating into ``d[bn/2]``."""
    n = bn // 2
    regs = ",".join(f"%{i}" for i in range(n))
    w = CodeWriter()
    w("static __device__ __forceinline__ void tr_wgmma(float* d, uint64_t da, uint64_t db) {")
    w(f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n"')
    w(f'                 "wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{ptx_type}.{ptx_type} "')
    w(f'                 "{{{regs}}}, %{n}, %{n + 1}, p, 1, 1, {trans_a}, {trans_b};\\n}}\\n"')
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(n))
    w(f"                 : {outs}")
    w('                 : "l"(da), "l"(db), "r"(1));')
    w("}")
    return w.render()


def _epilogue(op: Any, renderer: CudaRenderer, dtype: str, guarded: bool = False) -> list[str]:
    """C statements applying ``op.epilogue`` in order to float ``v`` at (``row``, ``col``); ``guarded``:
    bias and residual are read only where ``inside`` (the TMA-store path visits rows past M)."""
    bias = renderer.to_float(dtype, "bias[col]")
    residual = renderer.to_float(dtype, "residual[(int64_t)row * N + col]")
    if guarded:
        bias, residual = f"inside ? {bias} : 0.0f", f"inside ? {residual} : 0.0f"
    return statements(op.epilogue, CUDA, bias=bias, residual=residual)


def render(op: Any, sched: WgmmaSchedule) -> str:
    """CUDA C++ (no headers; NVRTC, ``-arch=sm_90a``) of ``extern "C" tr_wgmma_gemm`` for ``op``.

    Parameters: ``(const __grid_constant__ TrTensorMap tmA, tmB, tmC, uint16_t* C, const uint16_t* bias,
    const uint16_t* residual, float alpha, int M, int N, int K, int store_tma)``; ``tmC`` and ``store_tma``
    matter only to ``store="tma"`` schedules (0: the direct stores, for C rows TMA cannot address); launch ``sched.threads`` threads,
    ``sched.smem_bytes`` dynamic shared memory, a grid of ``min(tiles, SMs)`` (persistent) or ``tiles``.
    """
    sched.validate(op)
    dtype = op.dtype.value
    ptx = PTX_TYPE[dtype]
    r = CudaRenderer()
    a_k, b_k = operand_kmajor(op, "a"), operand_kmajor(op, "b")
    a_lay, b_lay = operand_layouts(sched.bm, a_k), operand_layouts(sched.bn, b_k)
    a_bytes = sum(t.size_bytes for t in a_lay)
    b_bytes = sum(t.size_bytes for t in b_lay)
    align = SWIZZLE.period_bytes
    assert a_bytes % align == 0 and b_bytes % align == 0
    prod_regs = sched.register_split()[1]
    S = sched.stages

    w = CodeWriter()
    # No shape in the source: one binary serves every M, N, K of its kind (the cache key is the text).
    w(f"/* cuda-wgmma.gemm {sched.name}: {dtype}, A {op.layout_a}, B {op.layout_b}, "
      f"epilogue {','.join(op.epilogue) or 'none'} */")
    w.extend(r.prelude(1))
    w.extend(DEVICE_LIB)
    w.extend(_wgmma_function(sched.bn, ptx, 0 if a_k else 1, 0 if b_k else 1))
    w.extend(_tile_order(sched))
    cluster_attr = f"__cluster_dims__({sched.cluster}, 1, 1) " if sched.cluster > 1 else ""
    w(f'extern "C" __global__ void {cluster_attr}__launch_bounds__({sched.threads}, 1) {KERNEL_NAME}(')
    w("    const __grid_constant__ TrTensorMap tmA, const __grid_constant__ TrTensorMap tmB,")
    w("    const __grid_constant__ TrTensorMap tmC,")
    w("    uint16_t* __restrict__ C, const uint16_t* __restrict__ bias, const uint16_t* __restrict__ residual,")
    w("    float alpha, int M, int N, int K, int store_tma) {")
    w.extend(kernel_head(sched, a_bytes))
    w.extend(f"""    if (wg == 0) {{
        asm volatile("setmaxnreg.dec.sync.aligned.u32 {prod_regs};\\n");
        if (tid == 0) {{
            int s = 0;
            uint32_t phase = 0;
            for (int tile = cluster_id; tile < tiles; tile += clusters) {{
                int tm, tn;
                tr_tile_coords(tile, tiles_mc, tiles_n, tm, tn);
                tm = tm * {sched.cluster} + rank;
                for (int kk = 0; kk < k_iters; ++kk) {{
                    tr_mbar_wait(bars + 8u * ({S} + s), phase ^ 1u);
                    const uint32_t full = bars + 8u * s, sa = smem + s * {sched.stage_bytes}u, sb = sa + {a_bytes}u;
                    tr_mbar_expect_tx(full, {sched.stage_bytes}u);""")
    w._level = 5  # inside the k loop of the producer
    if a_k:
        w(f"tr_tma_load_2d(sa, &tmA, kk * {BK}, tm * {sched.bm}, full);")
    else:
        for i, t in enumerate(a_lay):
            w(f"tr_tma_load_2d(sa + {t.base_bytes}u, &tmA, tm * {sched.bm} + {64 * i}, kk * {BK}, full);")
    if sched.cluster == 1 and b_k:
        w(f"tr_tma_load_2d(sb, &tmB, kk * {BK}, tn * {sched.bn}, full);")
    elif sched.cluster == 1:
        for i, t in enumerate(b_lay):
            w(f"tr_tma_load_2d(sb + {t.base_bytes}u, &tmB, tn * {sched.bn} + {64 * i}, kk * {BK}, full);")
    elif b_k:  # this block's half of the B rows, multicast to both blocks of the pair
        half = sched.bn // 2
        w(f"tr_tma_load_2d_mc(sb + rank * {half * b_lay[0].pitch_bytes}u, &tmB, kk * {BK}, "
          f"tn * {sched.bn} + rank * {half}, full, 3);")
    else:  # this block's half of the 64-column atoms, multicast to both blocks of the pair
        per = len(b_lay) // 2
        w(f"for (int i = rank * {per}; i < rank * {per} + {per}; ++i)")
        w(f"    tr_tma_load_2d_mc(sb + i * {b_lay[1].base_bytes}u, &tmB, tn * {sched.bn} + 64 * i, kk * {BK}, full, 3);")
    w._level = 0
    w.extend(f"""                    if (++s == {S}) {{ s = 0; phase ^= 1u; }}
                }}
            }}
        }}""")
    w.extend(consumer_branch(op, sched, r, a_k, b_k))
    return w.render()


def consumer_branch(op: Any, sched: WgmmaSchedule, r: CudaRenderer, a_k: bool = True, b_k: bool = True,
                    proxy_fence: bool = False) -> str:
    """The consumer warpgroups' side of the kernel, from ``} else {`` after the producer's branch to the
    kernel's closing brace: ring waits, wgmma mainloop, stage releases, epilogue (direct or TMA store).
    Shared by every kernel on this machinery (the GEMM here, the implicit-GEMM conv in wgmma_conv.py);
    it reads the locals the kernel head declares (``smem``, ``bars``, ``cstage``, ``tiles*``, ``k_iters``,
    ``rank``, ``cluster_id``, ``clusters``, ``wg``, ``tid``) and the parameters ``C``, ``bias``,
    ``residual``, ``alpha``, ``M``, ``N``, ``tmC``, ``store_tma``. ``op.epilogue`` names the fused
    epilogues, applied in order. ``proxy_fence``: a ``fence.proxy.async`` after each full-barrier wait, for
    stages written through the generic proxy (cp.async) and published without a producer-side fence."""
    dtype = op.dtype.value
    store = {"bf16": "tr_f2bf", "fp16": "tr_f2h"}[dtype]
    a_lay, b_lay = operand_layouts(sched.bm, a_k), operand_layouts(sched.bn, b_k)
    a_lbo, a_sbo = descriptor_strides(a_lay)
    b_lbo, b_sbo = descriptor_strides(b_lay)
    a_bytes = sum(t.size_bytes for t in a_lay)
    # A k16 step moves 32 bytes along a K-major line, or 16 lines down an MN-major atom.
    a_kstep = 16 * ELEM_BYTES if a_k else 16 * a_lay[0].pitch_bytes
    b_kstep = 16 * ELEM_BYTES if b_k else 16 * b_lay[0].pitch_bytes
    # An m64 slice starts 64 lines into a K-major tile, or one atom further along an MN-major one.
    a_mstep = 64 * a_lay[0].pitch_bytes if a_k else a_lay[1].base_bytes if len(a_lay) > 1 else 0
    cons_regs = sched.register_split()[2]
    S = sched.stages
    m_slices, n_regs = sched.m_slices, sched.bn // 2
    fence = '\n                asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");' if proxy_fence else ""
    w = CodeWriter()
    w.extend(f"""    }} else {{
        asm volatile("setmaxnreg.inc.sync.aligned.u32 {cons_regs};\\n");
        const int cw = wg - 1, warp = tid / 32, lane = tid % 32;
        /* part: this warpgroup's slice of a shared tile (cooperative); walk: which of the block's tiles
           it takes (ping-pong: every {sched.tile_walkers}th, starting at its own index). */
        const int part = {"0" if sched.pingpong else "cw"}, walk = {"cw" if sched.pingpong else "0"};
        float acc[{m_slices}][{n_regs}];
        int cstep = 0;  /* TMA-store epilogue: which staging atom is next */
        (void)cstep;
        for (int j = walk, tile = cluster_id + walk * clusters; tile < tiles;
             j += {sched.tile_walkers}, tile += {sched.tile_walkers} * clusters) {{
            int tm, tn;
            tr_tile_coords(tile, tiles_mc, tiles_n, tm, tn);
            tm = tm * {sched.cluster} + rank;
            /* The producer fills the ring in the block's tile order: tile j starts at step j * k_iters. */
            const long long it0 = (long long)j * k_iters;
            int s = (int)(it0 % {S});
            uint32_t phase = (uint32_t)((it0 / {S}) & 1);
            {_turn_wait(sched)}
            #pragma unroll
            for (int i = 0; i < {m_slices}; ++i) {{
                #pragma unroll
                for (int j = 0; j < {n_regs}; ++j) acc[i][j] = 0.0f;
            }}
            int prev = -1;
            for (int kk = 0; kk < k_iters; ++kk) {{
                tr_mbar_wait(bars + 8u * s, phase);{fence}
                const uint32_t sa = smem + s * {sched.stage_bytes}u + part * {sched.m_slices * a_mstep}u;
                const uint32_t sb = smem + s * {sched.stage_bytes}u + {a_bytes}u;
                TR_WGMMA_FENCE();
                #pragma unroll
                for (int k16 = 0; k16 < {BK // 16}; ++k16) {{
                    const uint64_t db = tr_desc(sb + k16 * {b_kstep}u, {b_lbo}u, {b_sbo}u);
                    #pragma unroll
                    for (int i = 0; i < {m_slices}; ++i)
                        tr_wgmma(acc[i], tr_desc(sa + i * {a_mstep}u + k16 * {a_kstep}u, {a_lbo}u, {a_sbo}u), db);
                }}
                TR_WGMMA_COMMIT();
                TR_WGMMA_WAIT(1);
                if (prev >= 0 && lane == 0) {_release("prev", sched)}
                prev = s;
                if (++s == {S}) {{ s = 0; phase ^= 1u; }}
            }}
            {_turn_pass(sched)}
            TR_WGMMA_WAIT(0);
            if (lane == 0) {_release("prev", sched)}
            #pragma unroll
            for (int i = 0; i < {m_slices}; ++i) {{
                #pragma unroll
                for (int j = 0; j < {n_regs}; ++j) asm volatile("" : "+f"(acc[i][j]) :: "memory");
            }}
            /* wgmma m64nN accumulator layout: thread (warp, lane) holds rows warp*16 + lane/4 (+8),
               columns 8*j + 2*(lane%4) (+1) in acc[4j..4j+3] = (r, c), (r, c+1), (r+8, c), (r+8, c+1). */
            const int row0 = tm * {sched.bm} + part * {sched.wm} + warp * 16 + lane / 4;
            const int col0 = tn * {sched.bn} + 2 * (lane % 4);
            {_tma_store_epilogue(op, sched, r, dtype, store)}
            #pragma unroll
            for (int i = 0; i < {m_slices}; ++i) {{
                #pragma unroll
                for (int j = 0; j < {sched.bn // 8}; ++j) {{
                    #pragma unroll
                    for (int h = 0; h < 2; ++h) {{
                        const int row = row0 + i * 64 + h * 8;
                        const int c0 = col0 + j * 8;
                        if (row < M && c0 < N) {{
                            float out[2];
                            #pragma unroll
                            for (int e = 0; e < 2; ++e) {{
                                const int col = c0 + e < N ? c0 + e : c0;
                                float v = acc[i][4 * j + 2 * h + e];""")
    w._level = 8
    for line in _epilogue(op, r, dtype):
        w(line)
    w("out[e] = v;")
    w._level = 0
    w.extend(f"""                            }}
                            uint16_t* p = C + (int64_t)row * N + c0;
                            if (c0 + 1 < N && (N & 1) == 0) {{
                                *(uint32_t*)p = (uint32_t){store}(out[0]) | ((uint32_t){store}(out[1]) << 16);
                            }} else {{
                                p[0] = {store}(out[0]);
                                if (c0 + 1 < N) p[1] = {store}(out[1]);
                            }}
                        }}
                    }}
                }}
            }}
        }}
        {_tma_store_drain(sched)}
    }}
    {_cluster_exit(sched)}
}}""")
    return w.render()


def kernel_head(sched: WgmmaSchedule, a_bytes: int, k_iters: str = f"(K + {BK - 1}) / {BK}",
                maps: tuple[str, ...] = ("tmA", "tmB"), full_arrivals: int = 1) -> str:
    """The kernel body up to the warpgroup split: the 1024-aligned ring base, the C staging atoms and
    the mbarriers after it, the tile counts (``M``, ``N`` and ``k_iters``, a C expression), tensor-map
    prefetches, barrier initialisation (``full_arrivals`` per full barrier: 1, the producer's
    ``expect_tx``, for TMA-only producers), and the block (or cluster) barrier that publishes them."""
    S, align = sched.stages, SWIZZLE.period_bytes
    prefetch = "\n        ".join(f"tr_prefetch_map(&{m});" for m in maps)
    return f"""    extern __shared__ __align__(1024) unsigned char tr_smem[];
    const uint32_t smem = (tr_smem_addr(tr_smem) + {align - 1}u) & ~{align - 1}u;
    /* stage s: A at smem + s * {sched.stage_bytes}, B {a_bytes} bytes after it; then full[S], empty[S] */
    const uint32_t cstage = smem + {S * sched.stage_bytes}u;  /* C staging atoms (TMA-store epilogue) */
    const uint32_t bars = cstage + {sched.c_staging_bytes}u;
    const int tiles_m = (M + {sched.bm - 1}) / {sched.bm}, tiles_n = (N + {sched.bn - 1}) / {sched.bn};
    /* A cluster of CL blocks walks tiles of CL tile rows (one per block, "rank") sharing one B panel. */
    const int rank = blockIdx.x % {sched.cluster}, cluster_id = blockIdx.x / {sched.cluster};
    const int clusters = gridDim.x / {sched.cluster}, tiles_mc = (tiles_m + {sched.cluster - 1}) / {sched.cluster};
    const int tiles = tiles_mc * tiles_n, k_iters = {k_iters};
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {{
        {prefetch}
        for (int s = 0; s < {S}; ++s) {{
            tr_mbar_init(bars + 8u * s, {full_arrivals}u);
            tr_mbar_init(bars + 8u * ({S} + s), {4 * (1 if sched.pingpong else sched.consumers) * sched.cluster}u);
        }}
        tr_mbar_init(bars + 8u * {2 * S}, 1u);
        tr_mbar_init(bars + 8u * {2 * S + 1}, 1u);
        asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");
    }}
    {_cluster_sync(sched)}"""


def _tma_store_epilogue(op: Any, sched: WgmmaSchedule, r: CudaRenderer, dtype: str, store: str) -> str:
    """``store="tma"``: each consumer warpgroup writes its part of C, 64 x 64 at a time, into a staging
    atom laid out as TMA's 128B swizzle (the same ``TileLayout`` algebra as the operands: the lanes of a
    warp hit 8 different 16-byte bank groups), fences it to the async proxy, and one thread issues the
    bulk tensor store; two atoms alternate so the next is written while the last is read out. TMA clips
    rows and columns past M and N. When ``store_tma`` is 0 (C rows not 16-byte aligned) the loop is
    skipped and the direct stores below run instead. Ends with ``continue`` (next tile)."""
    if sched.store != "tma":
        return ""
    lay = TileLayout(64, 64, ELEM_BYTES, "row", swizzle=SWIZZLE)
    w = CodeWriter()
    w("if (store_tma) {")
    w(f"    const uint32_t catoms = cstage + cw * {2 * C_ATOM_BYTES}u;")
    w("    #pragma unroll")
    w(f"    for (int i = 0; i < {sched.m_slices}; ++i) {{")
    w("        #pragma unroll")
    w(f"        for (int a = 0; a < {sched.bn // 64}; ++a) {{")
    w(f"            const uint32_t buf = catoms + (cstep & 1) * {C_ATOM_BYTES}u;")
    w("            ++cstep;")
    w('            if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 1;\\n" ::: "memory");')
    w('            asm volatile("bar.sync %0, 128;\\n" :: "r"(1 + cw) : "memory");')
    w("            #pragma unroll")
    w("            for (int jj = 0; jj < 8; ++jj) {")
    w("                #pragma unroll")
    w("                for (int h = 0; h < 2; ++h) {")
    w("                    const int row = row0 + i * 64 + h * 8, r_in = warp * 16 + lane / 4 + h * 8;")
    w("                    const int c_in = jj * 8 + 2 * (lane % 4);")
    w("                    float out[2];")
    w("                    #pragma unroll")
    w("                    for (int e = 0; e < 2; ++e) {")
    w("                        const int col = col0 + (a * 8 + jj) * 8 + e;")
    w("                        const bool inside = row < M && col < N;")
    w("                        float v = acc[i][4 * (a * 8 + jj) + 2 * h + e];")
    for line in _epilogue(op, r, dtype, guarded=True):
        w("                        " + line)
    w("                        out[e] = v;")
    w("                    }")
    w(f"                    const uint32_t word = (uint32_t){store}(out[0]) | ((uint32_t){store}(out[1]) << 16);")
    w(f'                    asm volatile("st.shared.b32 [%0], %1;\\n" :: "r"(buf + {lay.c_offset("r_in", "c_in")}), '
      '"r"(word) : "memory");')
    w("                }")
    w("            }")
    w('            asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')
    w('            asm volatile("bar.sync %0, 128;\\n" :: "r"(1 + cw) : "memory");')
    w("            if (tid == 0) {")
    w(f"                tr_tma_store_2d(&tmC, tn * {sched.bn} + a * 64, tm * {sched.bm} + part * {sched.wm} + i * 64, buf);")
    w('                asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");')
    w("            }")
    w("        }")
    w("    }")
    w("    continue;")
    w("}")
    return w.render().replace("\n", "\n            ")


def _tma_store_drain(sched: WgmmaSchedule) -> str:
    """The staging atoms must outlive the bulk stores reading them: wait before the block exits."""
    if sched.store != "tma":
        return ""
    return 'if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;\\n" ::: "memory");'


def _cluster_sync(sched: WgmmaSchedule) -> str:
    """Every barrier of the block (and, in a pair, of the peer) initialised before anyone uses one."""
    if sched.cluster == 1:
        return "__syncthreads();"
    return ('asm volatile("barrier.cluster.arrive.release.aligned;\\n" ::: "memory");\n'
            '    asm volatile("barrier.cluster.wait.acquire.aligned;\\n" ::: "memory");')


def _cluster_exit(sched: WgmmaSchedule) -> str:
    """A pair leaves together: the peer may still arrive on this block's barriers until it is done."""
    if sched.cluster == 1:
        return ""
    return ('asm volatile("barrier.cluster.arrive.release;\\n" ::: "memory");\n'
            '    asm volatile("barrier.cluster.wait.acquire;\\n" ::: "memory");')


def _release(stage: str, sched: WgmmaSchedule) -> str:
    """One warp's release of ring stage ``stage``: its own empty barrier, and the peer's in a pair."""
    own = f"tr_mbar_arrive(bars + 8u * ({sched.stages} + {stage}));"
    if sched.cluster == 1:
        return own
    return f"{{ {own} tr_mbar_arrive_remote(bars + 8u * ({sched.stages} + {stage}), rank ^ 1); }}"


def _turn_wait(sched: WgmmaSchedule) -> str:
    """Ping-pong: before its t-th tile a consumer waits until the other has passed every full-barrier
    wait of the tile before (its turn barrier, after ``bars + 16 S``). Without this a consumer could
    wait on a stage two ring phases ahead, and the parity wait cannot tell those phases apart."""
    if not sched.pingpong:
        return ""
    return ("{ const int t = (j - walk) / 2; if (cw == 1 || t > 0) "
            f"tr_mbar_wait(bars + 8u * ({2 * sched.stages} + cw), (uint32_t)((cw == 1 ? t : t - 1) & 1)); }}")


def _turn_pass(sched: WgmmaSchedule) -> str:
    """Ping-pong: hand the mainloop turn to the other consumer once this one's loads have all landed."""
    if not sched.pingpong:
        return ""
    return f"if (tid == 0) tr_mbar_arrive(bars + 8u * ({2 * sched.stages} + 1 - cw));"


def _tile_order(sched: WgmmaSchedule) -> str:
    """Persistent tile index -> (tile row, tile column): ``group`` tile rows (raster "m") or columns
    ("n") at a time, so the blocks of one wave share a few A (or B) panels in L2."""
    major, minor = ("tm", "tn") if sched.raster == "m" else ("tn", "tm")
    count_major, count_minor = ("tiles_m", "tiles_n") if sched.raster == "m" else ("tiles_n", "tiles_m")
    return f"""static __device__ __forceinline__ void tr_tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {{
    const int per_group = {sched.group} * {count_minor};
    const int g = t / per_group, first = g * {sched.group};
    const int size = min({count_major} - first, {sched.group});
    const int rest = t - g * per_group;
    {major} = first + rest % size;
    {minor} = rest / size;
}}
"""


def render_tma_probe() -> str:
    """A kernel that TMA-loads one 64 x 64 16-bit tile with the 128B swizzle and copies the raw shared
    memory out: the GPU check that TMA's byte placement is ``TileLayout(..., TmaSwizzle("128B"))``."""
    w = CodeWriter()
    w.extend(CudaRenderer().prelude(1))
    w.extend(DEVICE_LIB)
    w.extend(r"""extern "C" __global__ void tr_tma_probe(const __grid_constant__ TrTensorMap tm, uint16_t* out) {
    __shared__ __align__(1024) uint16_t tile[64 * 64];
    __shared__ __align__(8) uint64_t bar;
    const uint32_t b = tr_smem_addr(&bar);
    if (threadIdx.x == 0) {
        tr_mbar_init(b, 1u);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        tr_mbar_expect_tx(b, 64u * 64u * 2u);
        tr_tma_load_2d(tr_smem_addr(tile), &tm, 0, 0, b);
    }
    tr_mbar_wait(b, 0u);
    for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) out[i] = tile[i];
}
""")
    return w.render()


def launch_geometry(op: Any, sched: WgmmaSchedule, sm_count: int,
                    max_clusters: int | None = None) -> tuple[int, int, int]:
    """(grid blocks, threads per block, dynamic shared memory bytes). Persistent: one block (or pair) per
    SM (pair of SMs) that can hold one at once (``max_clusters``, from the driver when known)."""
    cl = sched.cluster
    tile_rows = -(-op.m // sched.bm)
    tiles = -(-tile_rows // cl) * -(-op.n // sched.bn)
    slots = max_clusters if max_clusters else sm_count // cl
    grid = cl * (min(tiles, slots) if sched.persistent else tiles)
    return grid, sched.threads, sched.smem_bytes


def tma_boxes(op: Any, sched: WgmmaSchedule) -> dict[str, dict[str, Any]]:
    """What the host encodes into each tensor map: global dims (inner first), box dims, 128B swizzle."""
    out = {}
    for which, rows in (("a", sched.bm), ("b", sched.bn)):
        outer, inner = op.shapes()[which]
        kmajor = operand_kmajor(op, which)
        if which == "b" and kmajor:
            rows //= sched.cluster  # each block of a pair loads half the B rows
        out[which] = {"dims": (inner, outer), "box": (BK, rows) if kmajor else (64, BK), "kmajor": kmajor}
    return out


def rendered(op: Any, sched: WgmmaSchedule, sm_count: int) -> Any:
    """The CUDA emitter's ``Rendered`` for ``op`` (source, launch geometry, metadata). ``params`` names the
    kernel's arguments in order; the tensor maps ``tmA``/``tmB`` are built on the host (``tma.py``)."""
    from .render import Rendered

    src = render(op, sched)
    grid, threads, smem = launch_geometry(op, sched, sm_count)
    a_k, b_k = operand_kmajor(op, "a"), operand_kmajor(op, "b")
    meta = {
        "name": f"tr_{sched.name}",
        "tile": {"M": sched.bm, "N": sched.bn, "K": BK, "stages": sched.stages, "consumers": sched.consumers,
                 "pingpong": sched.pingpong, "cluster": sched.cluster},
        "fragments": {"mma": f"wgmma.mma_async m64n{sched.bn}k16", "dtype_in": op.dtype.value, "dtype_acc": "fp32",
                      "load": "TMA cp.async.bulk.tensor.2d, 128B swizzle" + ("" if a_k else " (A MN-major)")
                              + ("" if b_k else " (B MN-major)")},
        "smem": {"a": [t.describe() for t in operand_layouts(sched.bm, a_k)],
                 "b": [t.describe() for t in operand_layouts(sched.bn, b_k)], "stage_bytes": sched.stage_bytes},
        "registers": dict(zip(("entry", "producer", "consumer"), sched.register_split(), strict=True)),
        "launch": {"grid": [grid, 1, 1], "block": [threads, 1, 1], "dynamic_smem": smem,
                   "persistent": sched.persistent},
        "epilogue": list(op.epilogue),
        "tma_padding": tma_unsupported(op),
    }
    params = ("tmA", "tmB", "tmC", "out", "bias", "residual", "alpha", "M", "N", "K", "store_tma")
    return Rendered(f"tr_{sched.name}", KERNEL_NAME, src, params, (grid, 1, 1), (threads, 1, 1), smem, meta)
