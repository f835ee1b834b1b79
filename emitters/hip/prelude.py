"""The two preludes a HIP kernel body is rendered after (issue 19): one for AMD (hipcc, the MFMA builtins),
one for NVIDIA (NVRTC), where the same body runs for its logic with each MFMA done in software.

A body sees: ``TR_LDS(type, name, n, size, offset)`` (declares ``type name[n][size]`` in LDS: a static
``__shared__`` array on AMD, a view at byte ``offset`` of the dynamic shared memory on NVIDIA, where a block's
static shared memory stops at 48 KiB), ``tr_elem`` (the element type: ``unsigned short`` bits for bf16 and fp16, ``float`` for fp32),
``tr_frag`` (an MFMA input operand: ``TR_PER`` elements, 4 16-bit values or 1 fp32), ``tr_acc`` (16 fp32
accumulators, ``TR_ACC(acc, v)``), ``tr_mfma(a, b, acc)`` (``v_mfma_f32_32x32x8`` for 16-bit types,
``32x32x2`` for fp32), ``TR_LANE`` and ``TR_WAVE_ID`` (its lane in, and its number of, 64-lane wavefronts),
``tr_to_float`` / ``tr_from_float`` for the element type, ``tr_gelu`` (the epilogue's), and ``TR_SYNC()``
for the workgroup barrier.

On NVIDIA a wavefront is two consecutive warps. The software MFMA places every operand exactly where the
hardware's does (emitters/hip/mfma.py, checked against AMD's tables): each lane writes its A and B
registers to its wavefront's scratch in shared memory, the two warps meet at a named barrier of 64
threads, and each lane computes the 16 outputs its registers hold, D = A B + C, summed in fp32. A body whose
lanes load the wrong elements computes a wrong product here exactly as it would on an MI200 or MI300.
"""

from __future__ import annotations

from ..gpu import EPILOGUE, GELU

__all__ = ["EPILOGUE", "prelude"]

# the element type and the operand of each dtype's MFMA (TR_PER elements a lane)
COMMON = r"""#if TR_FP32
typedef float tr_elem;
#define TR_PER 1
#define TR_MFMA_K 2
#else
typedef unsigned short tr_elem;
#define TR_PER 4
#define TR_MFMA_K 8
#endif
struct alignas(TR_PER * sizeof(tr_elem)) tr_frag { tr_elem v[TR_PER]; };  // one 8-byte (4-byte) LDS read
#define TR_VEC (16 / (int)sizeof(tr_elem))
typedef uint4 tr_vec16;
typedef uint2 tr_vec8;
"""

AMD = r"""#include <hip/hip_runtime.h>
typedef float tr_f32x16 __attribute__((ext_vector_type(16)));
typedef short tr_s16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 tr_h16x4 __attribute__((ext_vector_type(4)));
struct tr_acc { tr_f32x16 r; };
#define TR_LDS(type, name, n, size, offset) __shared__ __attribute__((aligned(16))) type name[n][size]
#define TR_ACC(acc, i) ((acc).r[i])
#define TR_LANE ((int)(threadIdx.x & 63))
#define TR_WAVE_ID ((int)(threadIdx.x >> 6))
#define TR_SYNC() __syncthreads()
#if TR_FP16
__device__ __forceinline__ float tr_to_float(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
__device__ __forceinline__ unsigned short tr_from_float(float f) {
  return __builtin_bit_cast(unsigned short, (_Float16)f);
}
#endif
__device__ __forceinline__ void tr_mfma(const tr_frag& a, const tr_frag& b, tr_acc& c) {
#if TR_FP32
  c.r = __builtin_amdgcn_mfma_f32_32x32x2f32(a.v[0], b.v[0], c.r, 0, 0, 0);
#else
  tr_s16x4 av = {(short)a.v[0], (short)a.v[1], (short)a.v[2], (short)a.v[3]};
  tr_s16x4 bv = {(short)b.v[0], (short)b.v[1], (short)b.v[2], (short)b.v[3]};
#endif
#if TR_FP32
#elif TR_FP16
  c.r = __builtin_amdgcn_mfma_f32_32x32x8f16(__builtin_bit_cast(tr_h16x4, av), __builtin_bit_cast(tr_h16x4, bv),
                                             c.r, 0, 0, 0);
#else
  c.r = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(av, bv, c.r, 0, 0, 0);
#endif
}
"""

NVIDIA = r"""struct tr_acc { float r[16]; };
extern __shared__ __align__(16) unsigned char tr_dynamic_smem[];
#define TR_LDS(type, name, n, size, offset) type (*name)[size] = reinterpret_cast<type (*)[size]>(tr_dynamic_smem + (offset))
#define TR_ACC(acc, i) ((acc).r[i])
#define TR_LANE ((int)(threadIdx.x & 63))
#define TR_WAVE_ID ((int)(threadIdx.x >> 6))
#define TR_SYNC() __syncthreads()
#if TR_FP16
__device__ __forceinline__ float tr_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ unsigned short tr_from_float(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#endif
"""

# The software MFMA (NVIDIA): one wavefront of 64 lanes is two warps, which meet at named barrier
# 1 + wavefront (bar.sync with 64 threads); TR_WAVES (the block's wavefronts) is defined before the prelude.
NVIDIA_MFMA = r"""__device__ __forceinline__ void tr_wave_sync() {
  asm volatile("bar.sync %0, 64;" :: "r"(TR_WAVE_ID + 1) : "memory");
}
__device__ void tr_mfma(const tr_frag& a, const tr_frag& b, tr_acc& c) {
  __shared__ tr_elem tr_scratch[TR_WAVES][2 * 64 * TR_PER];  // per wavefront: A then B, 64 lanes x TR_PER
  tr_elem* sa = tr_scratch[TR_WAVE_ID];
  tr_elem* sb = sa + 64 * TR_PER;
  const int lane = TR_LANE;
  for (int e = 0; e < TR_PER; ++e) { sa[lane * TR_PER + e] = a.v[e]; sb[lane * TR_PER + e] = b.v[e]; }
  tr_wave_sync();
  const int j = lane & 31;
  for (int v = 0; v < 16; ++v) {
    const int i = 8 * (v >> 2) + 4 * (lane >> 5) + (v & 3);  // D[i][j] is register v of this lane
    float s = c.r[v];
    for (int kk = 0; kk < TR_MFMA_K; ++kk) {  // A[i][kk]: lane i + 32 (kk / TR_PER), element kk % TR_PER
      const int ia = (i + 32 * (kk / TR_PER)) * TR_PER + kk % TR_PER, ib = (j + 32 * (kk / TR_PER)) * TR_PER + kk % TR_PER;
      s += tr_to_float(sa[ia]) * tr_to_float(sb[ib]);
    }
    c.r[v] = s;
  }
  tr_wave_sync();
}
"""

# bf16 on both: the upper half of an fp32, rounded to nearest even (a NaN stays a NaN); fp32 as it is
BF16 = r"""#if TR_FP32
__device__ __forceinline__ float tr_to_float(float x) { return x; }
__device__ __forceinline__ float tr_from_float(float f) { return f; }
#elif !TR_FP16
__device__ __forceinline__ float tr_to_float(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }
__device__ __forceinline__ unsigned short tr_from_float(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (unsigned short)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
#endif
"""


def prelude(target: str, dtype: str, waves: int) -> str:
    """The prelude for ``target`` ("amd" or "nvidia"), the kernel's element type ("bf16", "fp16" or "fp32")
    and the wavefronts of its workgroup."""
    if target not in ("amd", "nvidia"):
        raise ValueError(f"prelude target {target!r}")
    if dtype not in ("bf16", "fp16", "fp32"):
        raise ValueError(f"prelude dtype {dtype!r}")
    head = (f"#define TR_FP16 {int(dtype == 'fp16')}\n#define TR_FP32 {int(dtype == 'fp32')}\n"
            f"#define TR_WAVES {waves}\n")
    if target == "amd":
        return head + AMD.replace("struct tr_acc", COMMON + "struct tr_acc", 1) + BF16 + GELU
    return head + COMMON + NVIDIA + BF16 + GELU + NVIDIA_MFMA
