"""The Hopper kernels' PTX wrappers, as renderer data: the inline functions every kernel's source starts
with (``DEVICE_LIB``: mbarriers, TMA loads, multicast and stores, wgmma descriptors and fences), the GEMM
producer's TMA loads with an L2 cache policy (``HINT_LIB``), the gathering producer's (``GATHER_LIB``: a 3-d
TMA load, a zero-filling ``cp.async``), the wgmma instruction of one tile width (``wgmma_instruction``),
``render_tma_probe``, the GPU check of TMA's swizzled byte placement, the descriptor functions of the 64B and
32B swizzles (``swizzled_desc_lib``), and the PTX names of the input types (``PTX_TYPE``).
"""

from __future__ import annotations

from ...cstyle import CodeWriter
from ..render import CudaRenderer

PTX_TYPE = {"bf16": "bf16", "fp16": "f16"}  # the PTX names of the 16-bit input types
PACK2 = {"bf16": "tr_f2bf2", "fp16": "tr_f2h2"}  # DEVICE_LIB's packed conversions of two fp32 values
# the 8-bit input types: (PTX name, accumulator's PTX type, its C type, its inline-asm constraint)
PTX_TYPE_8BIT = {"fp8e4m3": ("e4m3", "f32", "float", "f"), "fp8e5m2": ("e5m2", "f32", "float", "f"),
                 "int8": ("s8", "s32", "int", "r")}

# mbarriers, TMA loads (multicast too) and stores, wgmma descriptors and fences: every Hopper kernel.
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
/* Two fp32 values as one word of 16-bit C, ``lo`` in the low half, rounded to nearest even by one instruction
   (the epilogue's staging stores: the per-value software rounding took ~6 instructions a value). */
static __device__ __forceinline__ uint32_t tr_f2bf2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
static __device__ __forceinline__ uint32_t tr_f2h2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
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


# The GEMM producer's TMA loads with an L2 cache policy (``l2_hint``), plain and multicast.
HINT_LIB = r"""static __device__ __forceinline__ void tr_tma_load_2d_ef(uint32_t dst, const TrTensorMap* map, int c0, int c1,
                                                         uint32_t bar, uint64_t pol) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "l"(pol) : "memory");
}
static __device__ __forceinline__ void tr_tma_load_2d_mc_ef(uint32_t dst, const TrTensorMap* map, int c0, int c1,
                                                            uint32_t bar, uint16_t mask, uint64_t pol) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5, %6;\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask), "l"(pol) : "memory");
}
"""


# The gathering producer's: a 3-d TMA load (the conv's filter) and a zero-filling 16-byte cp.async.
GATHER_LIB = r"""static __device__ __forceinline__ void tr_tma_load_3d(uint32_t dst, const TrTensorMap* map, int c0, int c1,
                                                      int c2, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
/* 16 bytes global -> shared, bypassing L1; src_bytes 0 writes 16 zero bytes (padding, edges). */
static __device__ __forceinline__ void tr_cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
"""


LAYOUT_TYPE = {128: 1, 64: 2, 32: 3}  # the wgmma descriptor's swizzle field (bits 62-63) by swizzled line bytes


def desc_name(line: int) -> str:
    """The descriptor function of tiles whose swizzled lines are ``line`` bytes: ``tr_desc`` (128B, in
    ``DEVICE_LIB``) or ``swizzled_desc_lib``'s."""
    return "tr_desc" if line == 128 else f"tr_desc{line}"


def swizzled_desc_lib(line: int) -> str:
    """A wgmma descriptor function for the 64B or 32B swizzle (``tr_desc`` with its layout field replaced); none
    at 128B."""
    if line == 128:
        return ""
    return f"""/* wgmma shared-memory descriptor with the {line}B swizzle (layout type {LAYOUT_TYPE[line]}). */
static __device__ __forceinline__ uint64_t {desc_name(line)}(uint32_t addr, uint32_t lbo, uint32_t sbo) {{
    return (tr_desc(addr, lbo, sbo) & ~(3ull << 62)) | ({LAYOUT_TYPE[line]}ull << 62);
}}
"""


def wgmma_instruction(bn: int, ptx_type: str, trans_a: int, trans_b: int) -> str:
    """``tr_wgmma(float* d, descA, descB)``: one m64n{bn}k16 wgmma accumulating into ``d[bn/2]``."""
    return _wgmma_function(bn, "float* d, uint64_t da, uint64_t db", f"k16.f32.{ptx_type}.{ptx_type}",
                           f", 1, 1, {trans_a}, {trans_b}", "f", "1")


def wgmma_instruction_8bit(bn: int, dtype: str) -> str:
    """``tr_wgmma(acc* d, descA, descB, int accumulate)``: one m64n{bn}k32 wgmma of 8-bit operands (``dtype``: fp8e4m3,
    fp8e5m2 or int8), both K-major (8-bit wgmma has no transposed form), into fp32 (FP8) or s32 (int8) ``d[bn/2]``;
    ``accumulate`` 0 overwrites ``d`` (the first k32 step of a promoted block). Integer wgmma has no operand scales
    (negation) and takes n of 8, 16, 24 and multiples of 16 only (``INT8_WIDTHS``)."""
    ptx, acc_ptx, ctype, con = PTX_TYPE_8BIT[dtype]
    return _wgmma_function(bn, f"{ctype}* d, uint64_t da, uint64_t db, int accumulate = 1",
                           f"k32.{acc_ptx}.{ptx}.{ptx}", "" if acc_ptx == "s32" else ", 1, 1", con, "accumulate")


def _wgmma_function(bn: int, params: str, shape_types: str, tail: str, constraint: str, scale_d: str) -> str:
    """The inline function ``tr_wgmma(params)`` issuing ``wgmma.mma_async...m64n{bn}{shape_types}`` on ``bn/2``
    accumulator registers (inline-asm ``constraint``), the descriptors, ``scale_d`` (nonzero: accumulate) and the
    instruction's immediates ``tail``."""
    n = bn // 2
    regs = ",".join(f"%{i}" for i in range(n))
    w = CodeWriter()
    w(f"static __device__ __forceinline__ void tr_wgmma({params}) {{")
    w(f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{n + 2}, 0;\\n"')
    w(f'                 "wgmma.mma_async.sync.aligned.m64n{bn}{shape_types} "')
    w(f'                 "{{{regs}}}, %{n}, %{n + 1}, p{tail};\\n}}\\n"')
    outs = ", ".join(f'"+{constraint}"(d[{i}])' for i in range(n))
    w(f"                 : {outs}")
    w(f'                 : "l"(da), "l"(db), "r"({scale_d}));')
    w("}")
    return w.render()


INT8_WIDTHS = (8, 16, 24, *range(32, 257, 16))  # the n of integer wgmma


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
