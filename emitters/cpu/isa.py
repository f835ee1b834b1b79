"""The per-ISA parts of the CPU renderer: what differs between AVX-512, AVX2+FMA, NEON and portable C.

Each ISA is a ``CStyleRenderer`` subclass that declares its limits (fp32 lanes, vector registers, the
machine and ISA flags it needs, its compiler flags) and a table of bodies for a small vector dialect
(``vf_load``, ``vf_fma``, ``vf_store_bf16``, ...). The GEMM, convolution and softmax renderers are
written once against that dialect; ``prelude()`` renders it for one ISA. Where an ISA gives no body for
an entry, the base supplies a generic one (partial loads through a small buffer, exp from the
primitives), so a new ISA is a table of a few dozen intrinsics.
"""

from __future__ import annotations

from typing import ClassVar

from ..cstyle import CodeWriter, CStyleRenderer

# The dialect: name -> (return type, parameters). Bodies come from the ISA tables or the generic ones.
DIALECT: dict[str, tuple[str, str]] = {
    "zero": ("vf", "void"),
    "set1": ("vf", "float x"),
    "load": ("vf", "const float* p"),
    "store": ("void", "float* p, vf v"),
    "add": ("vf", "vf a, vf b"),
    "sub": ("vf", "vf a, vf b"),
    "mul": ("vf", "vf a, vf b"),
    "div": ("vf", "vf a, vf b"),
    "max": ("vf", "vf a, vf b"),
    "min": ("vf", "vf a, vf b"),
    "select_pos": ("vf", "vf t, vf a, vf b"),  # a where t > 0, else b, lane by lane (a NaN in b is dropped)
    "fma": ("vf", "vf a, vf b, vf c"),  # a * b + c
    "fma_bcast": ("vf", "const float* a, vf b, vf c"),  # *a (broadcast) * b + c
    "bcast": ("vf", "const float* a"),  # *a broadcast into a register (reused by several FMAs)
    "round": ("vf", "vf a"),  # to nearest, ties to even
    "exp2i": ("vf", "vf a"),  # 2^a for integral a in [-126, 127]
    "hmax": ("float", "vf a"),
    "hsum": ("float", "vf a"),
    "load_n": ("vf", "const float* p, int n"),  # first n lanes, the rest 0
    "store_n": ("void", "float* p, vf v, int n"),
    "load_f16": ("vf", "const uint16_t* p"),
    "store_f16": ("void", "uint16_t* p, vf v"),
    "load_bf16": ("vf", "const uint16_t* p"),
    "store_bf16": ("void", "uint16_t* p, vf v"),
    "exp": ("vf", "vf x"),
    "gelu": ("vf", "vf x"),
}

GENERIC: dict[str, str] = {
    "select_pos": "float tt[VL], aa[VL], bb[VL];\nvf_store(tt, t);\nvf_store(aa, a);\nvf_store(bb, b);\n"
                  "for (int i = 0; i < VL; ++i) aa[i] = tt[i] > 0.0f ? aa[i] : bb[i];\nreturn vf_load(aa);",
    "fma_bcast": "return vf_fma(vf_set1(*a), b, c);",
    "bcast": "return vf_set1(*a);",
    "load_n": "float t[VL] = {0};\nfor (int i = 0; i < n; ++i) t[i] = p[i];\nreturn vf_load(t);",
    "store_n": "float t[VL];\nvf_store(t, v);\nfor (int i = 0; i < n; ++i) p[i] = t[i];",
    "load_f16": "float t[VL];\nfor (int i = 0; i < VL; ++i) t[i] = tr_h2f(p[i]);\nreturn vf_load(t);",
    "store_f16": "float t[VL];\nvf_store(t, v);\nfor (int i = 0; i < VL; ++i) p[i] = tr_f2h(t[i]);",
    "load_bf16": "float t[VL];\nfor (int i = 0; i < VL; ++i) t[i] = tr_bf2f(p[i]);\nreturn vf_load(t);",
    "store_bf16": "float t[VL];\nvf_store(t, v);\nfor (int i = 0; i < VL; ++i) p[i] = tr_f2bf(t[i]);",
    # Cephes expf: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, scaled by 2^n (about 1 ulp).
    # the clamp's constants first: vf_max/vf_min return their second operand when one is NaN (x86's
    # maxps/minps; the portable a > b ? a : b), so a NaN x stays NaN and propagates as expf's does
    "exp": """x = vf_min(vf_set1(88.72283f), vf_max(vf_set1(-87.33654f), x));
vf n = vf_round(vf_mul(x, vf_set1(1.44269504088896341f)));
n = vf_min(vf_max(n, vf_set1(-126.0f)), vf_set1(127.0f));
vf r = vf_fma(n, vf_set1(-0.693359375f), x);
r = vf_fma(n, vf_set1(2.12194440e-4f), r);
vf p = vf_set1(1.9875691500e-4f);
p = vf_fma(p, r, vf_set1(1.3981999507e-3f));
p = vf_fma(p, r, vf_set1(8.3334519073e-3f));
p = vf_fma(p, r, vf_set1(4.1665795894e-2f));
p = vf_fma(p, r, vf_set1(1.6666665459e-1f));
p = vf_fma(p, r, vf_set1(5.0000001201e-1f));
p = vf_fma(p, vf_mul(r, r), vf_add(r, vf_set1(1.0f)));
return vf_mul(p, vf_exp2i(n));""",
    # tanh form: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3); at x = -inf the
    # tanh form is -inf * 0, NaN in NumPy and the C reference, where exp's clamp would leave -inf: the select
    # keeps the quotient where x + inf > 0 (x > -inf, not NaN), else x * 0 (NaN)
    "gelu": """vf u = vf_mul(vf_set1(0.7978845608028654f), vf_fma(vf_mul(vf_set1(0.044715f), x), vf_mul(x, x), x));
vf g = vf_div(x, vf_add(vf_set1(1.0f), vf_exp(vf_mul(vf_set1(-2.0f), u))));
return vf_select_pos(vf_add(x, vf_set1(INFINITY)), g, vf_mul(x, vf_zero()));""",
}

# Scalar conversions in plain C, for every ISA (tails, packing, portable code). fp16 as in the FP16
# library (Maratyszcza), round to nearest even; bf16 round to nearest even, NaN kept quiet (0x7FC0),
# the same rule as tracea.kernels.dtypes.
SCALAR_CONVERSIONS = r"""
static inline float tr_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t tr_bits_from_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float tr_h2f(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    const float normalized = tr_f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = tr_f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    return tr_f32_from_bits(sign | (two_w < (1u << 27) ? tr_bits_from_f32(denormalized) : tr_bits_from_f32(normalized)));
}
static inline uint16_t tr_f2h(float f) {
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = tr_bits_from_f32(f), shl1_w = w + w, sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = tr_f32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = tr_bits_from_f32(base);
    const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
static inline float tr_bf2f(uint16_t b) { return tr_f32_from_bits((uint32_t)b << 16); }
static inline uint16_t tr_f2bf(float f) {
    uint32_t u = tr_bits_from_f32(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
"""


class CpuIsa(CStyleRenderer):
    """A CPU instruction family: its limits, flags and the bodies of the vector dialect."""

    family: ClassVar[str] = ""  # variant family, e.g. "cpu-avx512"
    lanes: ClassVar[int] = 1  # fp32 lanes per vector register
    vregs: ClassVar[int] = 32  # architectural vector registers
    vtype: ClassVar[str] = "float"
    machines: ClassVar[tuple[str, ...]] = ()  # platform.machine() values it runs on (empty: any)
    requires: ClassVar[tuple[str, ...]] = ()  # CpuInfo.isa names, all needed
    fp16_requires: ClassVar[tuple[str, ...]] = ()  # extra for fp16 inputs
    flags: ClassVar[tuple[str, ...]] = ()
    fp16_flags: ClassVar[tuple[str, ...]] = ()
    int8_flags: ClassVar[tuple[str, ...]] = ()  # an 8-bit kernel's (AVX-512: VNNI's vpdpbusd; variants.py requires it)
    isa_includes: ClassVar[tuple[str, ...]] = ()
    relax: ClassVar[str] = ""  # a spin-wait hint
    mma: ClassVar[str] = ""  # what the micro-kernel's inner instruction is, for the metadata
    vec: ClassVar[dict[str, str]] = {}
    includes = ("stdint.h", "stddef.h", "stdlib.h", "string.h", "math.h")
    kernel_prefix = '__attribute__((visibility("default"))) '  # everything else is static or hidden

    def compile_flags(self, dtype: str) -> list[str]:
        extra = {"fp16": self.fp16_flags, "int8": self.int8_flags}.get(dtype, ())
        return [*self.flags, *extra]

    def prelude(self, dtypes: tuple[str, ...] = ("fp32",)) -> str:
        """Includes, the vector type and the dialect; 16-bit conversions only for the types used."""
        w = CodeWriter()
        w("#define _GNU_SOURCE  /* sched_getcpu, CPU affinity */")
        w(self.render_includes(self.isa_includes))
        w(f"typedef {self.vtype} vf;", f"#define VL {self.lanes}")
        w(SCALAR_CONVERSIONS.strip("\n"))
        extra = self.vec.get("__decls__")
        if extra:
            w(extra)
        w(f"static inline void cpu_relax(void) {{ {self.relax} }}")
        skip = set()
        if "fp16" not in dtypes:
            skip |= {"load_f16", "store_f16"}
        if "bf16" not in dtypes:
            skip |= {"load_bf16", "store_bf16"}
        for name, (ret, params) in DIALECT.items():
            if name in skip:
                continue
            body = self.vec.get(name) or GENERIC[name]
            with w.block(f"static inline {ret} vf_{name}({params})"):
                w(body)
        for kind in ("f16", "bf16"):
            if f"load_{kind}" in skip:
                continue
            # partial 16-bit loads and stores through a small buffer (tails only)
            w(f"static inline vf vf_load_{kind}_n(const uint16_t* p, int n) "
              f"{{ uint16_t t[VL] = {{0}}; for (int i = 0; i < n; ++i) t[i] = p[i]; return vf_load_{kind}(t); }}")
            w(f"static inline void vf_store_{kind}_n(uint16_t* p, vf v, int n) "
              f"{{ uint16_t t[VL]; vf_store_{kind}(t, v); for (int i = 0; i < n; ++i) p[i] = t[i]; }}")
        return w.render()


class Avx512(CpuIsa):
    family = "cpu-avx512"
    lanes, vregs, vtype = 16, 32, "__m512"
    machines = ("x86_64", "amd64")
    requires = ("avx512f", "avx2", "fma")
    fp16_requires = ("f16c",)
    flags = ("-mavx512f", "-mavx2", "-mfma")
    fp16_flags = ("-mf16c",)
    int8_flags = ("-mavx512bw", "-mavx512vl", "-mavx512vnni")
    isa_includes = ("immintrin.h",)
    relax = "_mm_pause();"
    mma = "vfmadd231ps zmm (broadcast A x B vector)"
    vec = {
        "zero": "return _mm512_setzero_ps();",
        "set1": "return _mm512_set1_ps(x);",
        "load": "return _mm512_loadu_ps(p);",
        "store": "_mm512_storeu_ps(p, v);",
        "add": "return _mm512_add_ps(a, b);",
        "sub": "return _mm512_sub_ps(a, b);",
        "mul": "return _mm512_mul_ps(a, b);",
        "div": "return _mm512_div_ps(a, b);",
        "max": "return _mm512_max_ps(a, b);",
        "min": "return _mm512_min_ps(a, b);",
        "select_pos": "return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(t, _mm512_setzero_ps(), _CMP_GT_OQ), b, a);",
        "fma": "return _mm512_fmadd_ps(a, b, c);",
        # the broadcast folded into the FMA's memory operand ({1to16}): no register for it, so a 14 x 32
        # micro-kernel (28 accumulators + 2 B vectors) fits the 32 zmm registers without spills
        "fma_bcast": '__asm__("vfmadd231ps %1%{1to16%}, %2, %0" : "+v"(c) : "m"(*a), "v"(b));\nreturn c;',
        # one vbroadcastss into a register; the empty asm keeps the compiler from folding it back into
        # every FMA's memory operand (which would load A once per FMA instead of once per row)
        "bcast": 'vf r = _mm512_set1_ps(*a);\n__asm__("" : "+v"(r));\nreturn r;',
        "round": "return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);",
        "exp2i": "return _mm512_castsi512_ps(_mm512_slli_epi32("
                 "_mm512_add_epi32(_mm512_cvtps_epi32(a), _mm512_set1_epi32(127)), 23));",
        "hmax": "return _mm512_reduce_max_ps(a);",
        "hsum": "return _mm512_reduce_add_ps(a);",
        "load_n": "return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);",
        "store_n": "_mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);",
        "load_f16": "return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));",
        "store_f16": "_mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));",
        "load_bf16": "return _mm512_castsi512_ps(_mm512_slli_epi32("
                     "_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));",
        "store_bf16": """const __m512i u = _mm512_castps_si512(v);
__m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                                                 _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_srli_epi32(r, 16), _mm512_set1_epi32(0x7FC0));
_mm256_storeu_si256((__m256i*)p, _mm512_cvtepi32_epi16(r));""",
    }


class Avx2Fma(CpuIsa):
    family = "cpu-avx2-fma"
    lanes, vregs, vtype = 8, 16, "__m256"
    machines = ("x86_64", "amd64")
    requires = ("avx2", "fma")
    fp16_requires = ("f16c",)
    flags = ("-mavx2", "-mfma")
    fp16_flags = ("-mf16c",)
    isa_includes = ("immintrin.h",)
    relax = "_mm_pause();"
    mma = "vfmadd231ps ymm (broadcast A x B vector)"
    vec = {
        "__decls__": "static const int32_t tr_tail_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};",
        "zero": "return _mm256_setzero_ps();",
        "set1": "return _mm256_set1_ps(x);",
        "load": "return _mm256_loadu_ps(p);",
        "store": "_mm256_storeu_ps(p, v);",
        "add": "return _mm256_add_ps(a, b);",
        "sub": "return _mm256_sub_ps(a, b);",
        "mul": "return _mm256_mul_ps(a, b);",
        "div": "return _mm256_div_ps(a, b);",
        "max": "return _mm256_max_ps(a, b);",
        "min": "return _mm256_min_ps(a, b);",
        "select_pos": "return _mm256_blendv_ps(b, a, _mm256_cmp_ps(t, _mm256_setzero_ps(), _CMP_GT_OQ));",
        "fma": "return _mm256_fmadd_ps(a, b, c);",
        "round": "return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);",
        "exp2i": "return _mm256_castsi256_ps(_mm256_slli_epi32("
                 "_mm256_add_epi32(_mm256_cvtps_epi32(a), _mm256_set1_epi32(127)), 23));",
        "hmax": """__m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
m = _mm_max_ps(m, _mm_movehl_ps(m, m));
return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));""",
        "hsum": """__m128 m = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
m = _mm_add_ps(m, _mm_movehl_ps(m, m));
return _mm_cvtss_f32(_mm_add_ss(m, _mm_shuffle_ps(m, m, 1)));""",
        "load_n": "return _mm256_maskload_ps(p, _mm256_loadu_si256((const __m256i*)(tr_tail_mask + 8 - n)));",
        "store_n": "_mm256_maskstore_ps(p, _mm256_loadu_si256((const __m256i*)(tr_tail_mask + 8 - n)), v);",
        "load_f16": "return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));",
        "store_f16": "_mm_storeu_si128((__m128i*)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));",
        "load_bf16": "return _mm256_castsi256_ps(_mm256_slli_epi32("
                     "_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));",
        "store_bf16": """const __m256i u = _mm256_castps_si256(v);
__m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF),
                                                 _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))));
r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), _mm256_set1_epi32(0x7FC0),
                       _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
_mm_storeu_si128((__m128i*)p, _mm256_castsi256_si128(r));""",
    }


class Neon(CpuIsa):
    family = "cpu-neon"
    lanes, vregs, vtype = 4, 32, "float32x4_t"
    machines = ("aarch64", "arm64")
    requires = ("neon",)
    flags = ("-march=armv8-a",)
    isa_includes = ("arm_neon.h",)
    relax = '__asm__ __volatile__("yield");'
    mma = "fmla v.4s (broadcast A x B vector)"
    vec = {
        "zero": "return vdupq_n_f32(0.0f);",
        "set1": "return vdupq_n_f32(x);",
        "load": "return vld1q_f32(p);",
        "store": "vst1q_f32(p, v);",
        "add": "return vaddq_f32(a, b);",
        "sub": "return vsubq_f32(a, b);",
        "mul": "return vmulq_f32(a, b);",
        "div": "return vdivq_f32(a, b);",
        "max": "return vmaxq_f32(a, b);",
        "min": "return vminq_f32(a, b);",
        "select_pos": "return vbslq_f32(vcgtq_f32(t, vdupq_n_f32(0.0f)), a, b);",
        "fma": "return vfmaq_f32(c, a, b);",
        "round": "return vrndnq_f32(a);",
        "exp2i": "return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(a), vdupq_n_s32(127)), 23));",
        "hmax": "return vmaxvq_f32(a);",
        "hsum": "return vaddvq_f32(a);",
        "load_f16": "return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));",
        "store_f16": "vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));",
        "load_bf16": "return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));",
        "store_bf16": """const uint32x4_t u = vreinterpretq_u32_f32(v);
uint32x4_t r = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7FFF), vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1))));
r = vbslq_u32(vceqq_f32(v, v), vshrq_n_u32(r, 16), vdupq_n_u32(0x7FC0));
vst1_u16(p, vmovn_u32(r));""",
    }


class Portable(CpuIsa):
    """Plain C11, one lane: runs wherever a C compiler does (the compiler may vectorise it)."""

    family = "cpu-portable"
    lanes, vregs, vtype = 1, 32, "float"
    relax = ""
    mma = "scalar fma (register-blocked C)"
    vec = {
        "zero": "return 0.0f;",
        "set1": "return x;",
        "load": "return *p;",
        "store": "*p = v;",
        "add": "return a + b;",
        "sub": "return a - b;",
        "mul": "return a * b;",
        "div": "return a / b;",
        "max": "return a > b ? a : b;",
        "min": "return a < b ? a : b;",
        "select_pos": "return t > 0.0f ? a : b;",
        "fma": "return a * b + c;",
        "round": "return rintf(a);",
        "exp2i": "return ldexpf(1.0f, (int)a);",
        "hmax": "return a;",
        "hsum": "return a;",
        "load_n": "return n > 0 ? *p : 0.0f;",
        "store_n": "if (n > 0) *p = v;",
        "load_f16": "return tr_h2f(*p);",
        "store_f16": "*p = tr_f2h(v);",
        "load_bf16": "return tr_bf2f(*p);",
        "store_bf16": "*p = tr_f2bf(v);",
        "exp": "return expf(x);",
    }


ISAS: dict[str, type[CpuIsa]] = {cls.family: cls for cls in (Avx512, Avx2Fma, Neon, Portable)}


def isa_for(family: str) -> CpuIsa:
    return ISAS[family]()
