"""The two preludes a HIP kernel body is rendered after (issue 19): one for AMD (hipcc, the MFMA builtins),
one for NVIDIA (NVRTC), where the same body runs for its logic with each MFMA done in software.

A body sees: ``tr_frag`` (an MFMA input operand: 4 16-bit values, as ``unsigned short`` bits), ``tr_acc``
(16 fp32 accumulators, ``TR_ACC(acc, v)``), ``tr_mfma_32x32x8(a, b, acc)``, ``TR_LANE`` and ``TR_WAVE_ID``
(its lane in, and its number of, 64-lane wavefronts), ``tr_to_float`` / ``tr_from_float`` for the 16-bit
type, and ``TR_SYNC()`` for the workgroup barrier.

On NVIDIA a wavefront is two consecutive warps. The software MFMA places every operand exactly where the
hardware's does (emitters/hip/mfma.py, checked against AMD's tables): each lane writes its A and B
registers to its wavefront's scratch in shared memory, the two warps meet at a named barrier of 64
threads, and each lane computes the 16 outputs its registers hold, D = A B + C, summed in fp32. A body whose
lanes load the wrong elements computes a wrong product here exactly as it would on an MI200 or MI300.
"""

from __future__ import annotations

AMD = r"""#include <hip/hip_runtime.h>
typedef float tr_f32x16 __attribute__((ext_vector_type(16)));
typedef short tr_s16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 tr_h16x4 __attribute__((ext_vector_type(4)));
struct tr_frag { unsigned short v[4]; };
struct tr_acc { tr_f32x16 r; };
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
__device__ __forceinline__ void tr_mfma_32x32x8(const tr_frag& a, const tr_frag& b, tr_acc& c) {
  tr_s16x4 av = {(short)a.v[0], (short)a.v[1], (short)a.v[2], (short)a.v[3]};
  tr_s16x4 bv = {(short)b.v[0], (short)b.v[1], (short)b.v[2], (short)b.v[3]};
#if TR_FP16
  c.r = __builtin_amdgcn_mfma_f32_32x32x8f16(__builtin_bit_cast(tr_h16x4, av), __builtin_bit_cast(tr_h16x4, bv),
                                             c.r, 0, 0, 0);
#else
  c.r = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(av, bv, c.r, 0, 0, 0);
#endif
}
"""

NVIDIA = r"""struct tr_frag { unsigned short v[4]; };
struct tr_acc { float r[16]; };
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
__device__ void tr_mfma_32x32x8(const tr_frag& a, const tr_frag& b, tr_acc& c) {
  __shared__ unsigned short tr_scratch[TR_WAVES][512];  // per wavefront: A then B, 64 lanes x 4 values
  unsigned short* sa = tr_scratch[TR_WAVE_ID];
  unsigned short* sb = sa + 256;
  const int lane = TR_LANE;
  for (int e = 0; e < 4; ++e) { sa[lane * 4 + e] = a.v[e]; sb[lane * 4 + e] = b.v[e]; }
  tr_wave_sync();
  const int j = lane & 31;
  for (int v = 0; v < 16; ++v) {
    const int i = 8 * (v >> 2) + 4 * (lane >> 5) + (v & 3);  // D[i][j] is register v of this lane
    float s = c.r[v];
    for (int kk = 0; kk < 8; ++kk) {  // A[i][kk]: lane i + 32 (kk / 4), element kk % 4; B[kk][j] likewise
      s += tr_to_float(sa[(i + 32 * (kk >> 2)) * 4 + (kk & 3)]) * tr_to_float(sb[(j + 32 * (kk >> 2)) * 4 + (kk & 3)]);
    }
    c.r[v] = s;
  }
  tr_wave_sync();
}
"""

# bf16 on both: the upper half of an fp32, rounded to nearest even (a NaN stays a NaN)
BF16 = r"""#if !TR_FP16
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
    """The prelude for ``target`` ("amd" or "nvidia"), the kernel's 16-bit type ("bf16" or "fp16") and the
    wavefronts of its workgroup."""
    if target not in ("amd", "nvidia"):
        raise ValueError(f"prelude target {target!r}")
    head = f"#define TR_FP16 {1 if dtype == 'fp16' else 0}\n#define TR_WAVES {waves}\n"
    if target == "amd":
        return head + AMD + BF16
    return head + NVIDIA + BF16 + NVIDIA_MFMA
