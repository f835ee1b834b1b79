"""The CUDA C++ renderer: ``emitters/cstyle.py``'s C-style base with CUDA's spellings, plus the small
device library every Tracea kernel starts with (PTX wrappers for cp.async, ldmatrix, mma.sync and the
16-bit conversions, magic-number division, warp reductions).

NVRTC compiles without the CUDA headers on its path, so the prelude includes nothing: integer types
are typedefs, 16-bit floats travel as their bits (``uint16_t``) and convert through PTX ``cvt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..cstyle import CodeWriter, CStyleRenderer
from ..gpu import GELU, GpuRenderer


@dataclass(frozen=True)
class Rendered:
    """One kernel's CUDA C++ and how to launch it."""

    name: str
    entry: str
    source: str
    params: tuple[str, ...]  # argument order: op buffer names ("a", "x", "out", ...) and scalar names
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int  # dynamic shared memory per block, bytes
    metadata: dict[str, Any]


LIBRARY: tuple[tuple[str, str], ...] = (  # (what, its C); ``NARGS``: the size of TrArgs
    ("types", r"""typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define TR_NEG_INF __int_as_float(0xff800000u)

"""),
    ("args", r"""/* Every shape-dependent integer a kernel reads, by value (one binary serves every shape of its kind). */
struct TrArgs { int v[NARGS]; };

"""),
    ("smem_addr", r"""static __device__ __forceinline__ uint32_t tr_smem_addr(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
"""),
    ("div", r"""/* n / d for 0 <= n < 2^31 with (mul, shr) from the host (tracea.emitters.cuda.magic). */
static __device__ __forceinline__ int tr_div(int n, uint32_t mul, uint32_t shr) {
    return (int)((__umulhi((uint32_t)n, mul) + (uint32_t)n) >> shr);
}
"""),
    ("conversions", r"""static __device__ __forceinline__ float tr_bf2f(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }
static __device__ __forceinline__ float tr_h2f(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
static __device__ __forceinline__ uint16_t tr_f2bf(float f) {  /* round to nearest even; NaN stays NaN */
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static __device__ __forceinline__ uint16_t tr_f2h(float f) {
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
"""),
    ("warp_reductions", r"""static __device__ __forceinline__ float tr_warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float tr_warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
"""),
    ("tr_gelu", GELU),
)

TENSOR_LIBRARY: tuple[tuple[str, str], ...] = (  # sm_80+; ``MMA_T``: the 16-bit type as PTX names it
    ("header", r"""/* sm_80+: asynchronous copies, ldmatrix, mma.sync, packed conversions. */
"""),
    ("cp.async", r"""static __device__ __forceinline__ void tr_cp16(uint32_t dst, const void* src, uint32_t bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}
#define TR_CP_COMMIT() asm volatile("cp.async.commit_group;\n" ::: "memory")
#define TR_CP_WAIT(n) asm volatile("cp.async.wait_group %0;\n" :: "n"(n) : "memory")
"""),
    ("ldmatrix", r"""static __device__ __forceinline__ void tr_ldm4(uint32_t* r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
static __device__ __forceinline__ void tr_ldm4t(uint32_t* r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
"""),
    ("mma.sync", r"""static __device__ __forceinline__ void tr_mma(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.MMA_T.MMA_T.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
"""),
    ("pack", r"""static __device__ __forceinline__ uint32_t tr_pack2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.MMA_T" "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
"""),
    ("st.shared", r"""static __device__ __forceinline__ void tr_sts128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};\n" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
"""),
)


# The PTX statements kernels write in their bodies (beside the wrappers above), as templates over their
# operands: named barriers, fences, cp.async and bulk-copy groups, shared and global accesses with an
# ordering, register reallocation, cluster barriers, compiler barriers. A kernel asks the renderer for one
# (``CudaRenderer.asm``) instead of spelling it.
PTX_STATEMENTS: dict[str, str] = {
    "bar.sync": 'asm volatile("bar.sync %0, {threads};\\n" :: "r"({id}) : "memory");',  # named barrier, id a register
    "bar.sync.const": 'asm volatile("bar.sync {id}, {threads};\\n" ::: "memory");',  # named barrier, id a constant
    "cluster.arrive": 'asm volatile("barrier.cluster.arrive.release{aligned};\\n" ::: "memory");',
    "cluster.wait": 'asm volatile("barrier.cluster.wait.acquire{aligned};\\n" ::: "memory");',
    "fence.proxy.async": 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");',
    "fence.mbarrier_init": 'asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");',
    "cp.async.commit": 'asm volatile("cp.async.commit_group;\\n" ::: "memory");',
    "cp.async.wait": 'asm volatile("cp.async.wait_group {n};\\n" ::: "memory");',
    "cp.async.wait_all": 'asm volatile("cp.async.wait_all;\\n" ::: "memory");',
    "cp.async.arrive": 'asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\\n" :: "r"({bar}) : "memory");',
    "bulk.commit": 'asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");',
    "bulk.wait_read": 'asm volatile("cp.async.bulk.wait_group.read {n};\\n" ::: "memory");',
    "st.shared.b32": 'asm volatile("st.shared.b32 [%0], %1;\\n" :: "r"({addr}), "r"({value}) : "memory");',
    "st.shared.b16": 'asm volatile("st.shared.b16 [%0], %1;\\n" :: "r"({addr}), "h"({value}) : "memory");',
    "ld.shared.b32": 'asm volatile("ld.shared.b32 %0, [%1];\\n" : "=r"({value}) : "r"({addr}) : "memory");',
    "ld.acquire.gpu": 'asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\\n" : "=r"({value}) : "l"({addr}) : "memory");',
    "red.release.gpu.add": 'asm volatile("red.release.gpu.global.add.s32 [%0], 1;\\n" :: "l"({addr}) : "memory");',
    "setmaxnreg": 'asm volatile("setmaxnreg.{how}.sync.aligned.u32 {n};\\n");',  # how: inc or dec
    "policy.evict_first": 'asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\\n" : "=l"({policy}));',
    "compiler.fence": 'asm volatile("" ::: "memory");',  # no instruction: memory accesses stay on their side
    "compiler.pin": 'asm volatile("" : "+f"({value}) :: "memory");',  # no instruction: the value is live here
    "compiler.pin_int": 'asm volatile("" : "+r"({value}) :: "memory");',  # the same, for an int
}

class CudaRenderer(GpuRenderer):
    language: ClassVar[str] = "cuda"
    file_suffix: ClassVar[str] = ".cu"
    includes: ClassVar[tuple[str, ...]] = ()
    # The device library: PTX wrappers and helpers as data, so a renderer for another vendor (HIP) can
    # substitute its own bodies for the same names.
    library: ClassVar[tuple[tuple[str, str], ...]] = LIBRARY
    tensor_library: ClassVar[tuple[tuple[str, str], ...]] = TENSOR_LIBRARY
    mma_types: ClassVar[dict[str, str]] = {"bf16": "bf16", "fp16": "f16"}
    conversions: ClassVar[dict[str, tuple[str, str]]] = {"bf16": ("tr_bf2f", "tr_f2bf"), "fp16": ("tr_h2f", "tr_f2h")}
    ptx: ClassVar[dict[str, str]] = PTX_STATEMENTS
    code_for_op = {
        **CStyleRenderer.code_for_op,
        "exp": lambda x: f"__expf({x})",
        "to_float_bf16": lambda x: f"tr_bf2f({x})",
        "to_float_fp16": lambda x: f"tr_h2f({x})",
        "from_float_bf16": lambda x: f"tr_f2bf({x})",
        "from_float_fp16": lambda x: f"tr_f2h({x})",
    }
    # Declared limits: a block's opt-in shared memory is per target (arch.py); these are the language's.
    shared_max: ClassVar[int | None] = 232448
    registers_per_thread: ClassVar[int] = 255
    tensor_cores: ClassVar[tuple[str, ...]] = ("mma.sync.m16n8k16.f32.bf16", "mma.sync.m16n8k16.f32.f16")
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp16", "bf16")

    def to_float(self, dtype: str, expr: str) -> str:
        return expr if dtype == "fp32" else self.op(f"to_float_{dtype}", expr)

    def from_float(self, dtype: str, expr: str) -> str:
        return expr if dtype == "fp32" else self.op(f"from_float_{dtype}", expr)

    def prelude(self, nargs: int = 32) -> str:
        """The device library every kernel starts with; ``nargs`` ints in ``TrArgs``."""
        w = CodeWriter()
        w.extend("".join(text for _, text in self.library).replace("NARGS", str(nargs)))
        return w.render()

    def tensor_prelude(self, dtype: str, leave_out: tuple[str, ...] = ()) -> str:
        """The tensor-core wrappers (cp.async, ldmatrix, mma.sync, packing) for 16-bit ``dtype``, but the pieces
        named in ``leave_out`` (a kernel that brings its own)."""
        w = CodeWriter()
        w.extend("".join(text for key, text in self.tensor_library if key not in leave_out)
                 .replace("MMA_T", self.mma_types[dtype]))
        return w.render()

    def asm(self, name: str, **operands: object) -> str:
        """The PTX statement ``name`` of ``ptx`` with its ``operands`` (``asm("bulk.wait_read", n=1)``)."""
        return self.ptx[name].format(**operands)

    def converters(self, dtype: str) -> tuple[str, str]:
        """The names of the device functions converting 16-bit ``dtype`` to float and back."""
        return self.conversions[dtype]


PRELUDE = "".join(text for _, text in LIBRARY)  # NARGS not yet replaced
PRELUDE_SM80 = "".join(text for _, text in TENSOR_LIBRARY)


def prelude_sm80(dtype: str) -> str:
    """The tensor-core helpers for 16-bit ``dtype`` (bf16 or f16 in PTX)."""
    return CudaRenderer().tensor_prelude(dtype)
