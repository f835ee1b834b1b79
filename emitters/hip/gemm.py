"""The HIP MFMA GEMM (issue 19): C = alpha A B for row-major bf16/fp16 A (m x k) and B (k x n), fp32
accumulation, 16-bit C, any m, n, k (loads past an edge read zeros, stores past it are skipped).

A workgroup of ``waves_m x waves_n`` 64-lane wavefronts computes a ``bm x bn`` tile; each wavefront a
``bm / waves_m x bn / waves_n`` sub-tile of 32x32 MFMA tiles (``v_mfma_f32_32x32x8bf16_1k`` / ``...f16`` on
gfx90a, their CDNA3 spellings on gfx942). K advances ``bk`` at a time through two LDS buffers: the next
tile is loaded into registers while this one is multiplied, then written to the other buffer. A is kept in
LDS as rows of k and B transposed (columns of k), so that each lane's four k values of an MFMA operand
are contiguous; rows are padded by ``pad`` elements against bank conflicts. Every fragment index comes
from emitters/hip/mfma.py's placement expressions.

The same body is rendered after an AMD prelude (hipcc) or an NVIDIA one (NVRTC, software MFMA with the
same placements; prelude.py), so its logic is verified on an NVIDIA GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracea.doctor.errors import BadInputError

from .mfma import INSTRUCTIONS, c_expr
from .prelude import prelude

KERNEL = "tr_hip_gemm"


@dataclass(frozen=True)
class HipGemmSchedule:
    bm: int = 128
    bn: int = 128
    bk: int = 16
    waves_m: int = 2
    waves_n: int = 2
    pad: int = 4

    @property
    def waves(self) -> int:
        return self.waves_m * self.waves_n

    @property
    def threads(self) -> int:
        return 64 * self.waves

    @property
    def name(self) -> str:
        return f"mfma_{self.bm}x{self.bn}x{self.bk}_w{self.waves_m}x{self.waves_n}_p{self.pad}"

    def validate(self) -> None:
        if self.bm % (32 * self.waves_m) or self.bn % (32 * self.waves_n):
            raise BadInputError(f"{self.name}: each wavefront's tile must be whole 32x32 MFMA tiles")
        if self.bk % 8 or not 8 <= self.bk <= 64:
            raise BadInputError(f"bk: {self.bk} is not a multiple of 8 (the MFMA's k) in 8..64")
        if not 1 <= self.waves <= 15:
            raise BadInputError(f"waves: {self.waves} wavefronts (1..15: the NVIDIA prelude's named barriers)")
        for what, n in (("A", self.bm), ("B", self.bn)):
            if (n * self.bk) % self.threads:
                raise BadInputError(f"{what}'s {n}x{self.bk} tile does not divide over {self.threads} threads")
        if self.pad < 0 or self.pad % 4:
            raise BadInputError(f"pad: {self.pad} is not a multiple of 4 elements (8-byte fragment reads)")
        if 2 * 2 * (self.bm + self.bn) * (self.bk + self.pad) > 64 * 1024:
            raise BadInputError(f"{self.name}: two LDS buffers of A and B exceed 64 KiB")


CONV_KERNEL = "tr_hip_conv2d"

# What differs between the GEMM and the implicit-GEMM conv: the signature (the conv derives M, N, K from its
# shape) and how one element of A and of B is read (zero past an edge, or in the conv's padding).
GEMM = {
    "signature": f"""extern "C" __global__ void __launch_bounds__(THREADS) {KERNEL}(
    const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, unsigned short* __restrict__ C,
    int M, int N, int K, float alpha) {{""",
    "a": "(gm < M && gk < K) ? A[(long long)gm * K + gk] : (unsigned short)0",
    "b": "(gk < K && gn < N) ? B[(long long)gk * N + gn] : (unsigned short)0",
}
# NHWC input (nb x h x w x c), KRSC filter (N = k rows of K = r*s*c, B = its transpose), NPQK output
CONV = {
    "signature": f"""extern "C" __global__ void __launch_bounds__(THREADS) {CONV_KERNEL}(
    const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, unsigned short* __restrict__ C,
    int nb, int h, int w, int c, int p, int q, int N, int r, int s, int sh, int sw, int ph, int pw, int dh, int dw) {{
  const int M = nb * p * q, K = r * s * c;
  const float alpha = 1.0f;""",
    "a": """[&]() -> unsigned short {
        if (gm >= M || gk >= K) return 0;
        const int img = gm / (p * q), pq = gm % (p * q), rr = gk / (s * c), sc = gk % (s * c);
        const int y = (pq / q) * sh - ph + rr * dh, x = (pq % q) * sw - pw + (sc / c) * dw;
        if (y < 0 || y >= h || x < 0 || x >= w) return 0;
        return A[(((long long)img * h + y) * w + x) * c + sc % c];
      }()""",
    "b": "(gk < K && gn < N) ? B[(long long)gn * K + gk] : (unsigned short)0",
}


def render(dtype: str, sched: HipGemmSchedule, target: str, problem: str = "gemm") -> str:
    """The kernel source for ``target`` ("amd": hipcc, "nvidia": NVRTC with the software MFMA); ``problem``
    "gemm" (kernel ``tr_hip_gemm``) or "conv" (``tr_hip_conv2d``, implicit GEMM over NHWC)."""
    if dtype not in ("bf16", "fp16"):
        raise BadInputError(f"dtype: the HIP MFMA GEMM takes bf16 or fp16, not {dtype}")
    sched.validate()
    return prelude(target, dtype, sched.waves) + _body(sched, GEMM if problem == "gemm" else CONV)


def _body(s: HipGemmSchedule, kind: dict[str, str]) -> str:
    """The kernel: its signature and accumulators, then the staging, main loop and epilogue."""
    mf = INSTRUCTIONS["32x32x8_bf16"]  # the fp16 instruction places its operands the same way
    tm, tn = s.bm // s.waves_m // 32, s.bn // s.waves_n // 32
    a_per, b_per = s.bm * s.bk // s.threads, s.bn * s.bk // s.threads
    row, kk = c_expr(mf.a_row("lane")), c_expr(mf.a_k("lane", "e"))
    drow = c_expr(mf.d_row("lane", "v"))
    ld = s.bk + s.pad
    return f"""
#define BM {s.bm}
#define BN {s.bn}
#define BK {s.bk}
#define LD {ld}
#define THREADS {s.threads}
{kind["signature"]}
  __shared__ unsigned short As[2][BM * LD];
  __shared__ unsigned short Bs[2][BN * LD];
  const int tid = threadIdx.x, lane = TR_LANE, wave = TR_WAVE_ID;
  const int wm = wave / {s.waves_n}, wn = wave % {s.waves_n};
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  tr_acc acc[{tm}][{tn}];
#pragma unroll
  for (int i = 0; i < {tm}; ++i)
#pragma unroll
    for (int j = 0; j < {tn}; ++j)
#pragma unroll
      for (int v = 0; v < 16; ++v) TR_ACC(acc[i][j], v) = 0.0f;
""" + _staging(s, a_per, b_per, kind) + _mainloop(s, tm, tn, row, kk) + _epilogue(tm, tn, row, drow)


def _staging(s: HipGemmSchedule, a_per: int, b_per: int, kind: dict[str, str]) -> str:
    """Global to registers (``load``, zeros past the edges) and registers to LDS (``store``)."""
    return f"""  unsigned short ra[{a_per}], rb[{b_per}];
  const int ktiles = (K + BK - 1) / BK;
  // staging: thread tid holds {a_per} consecutive k of one A row and {b_per} consecutive n of one B row
  auto load = [&](int k0) {{
#pragma unroll
    for (int e = 0; e < {a_per}; ++e) {{
      const int f = tid * {a_per} + e;  // (names that cannot shadow a conv's shape: r, s, c, ...)
      const int gm = m0 + f / BK, gk = k0 + f % BK;
      ra[e] = {kind["a"]};
    }}
#pragma unroll
    for (int e = 0; e < {b_per}; ++e) {{
      const int f = tid * {b_per} + e;
      const int gk = k0 + f / BN, gn = n0 + f % BN;
      rb[e] = {kind["b"]};
    }}
  }};
  auto store = [&](int buf) {{
#pragma unroll
    for (int e = 0; e < {a_per}; ++e) {{
      const int f = tid * {a_per} + e;
      As[buf][(f / BK) * LD + f % BK] = ra[e];
    }}
#pragma unroll
    for (int e = 0; e < {b_per}; ++e) {{
      const int f = tid * {b_per} + e;
      Bs[buf][(f % BN) * LD + f / BN] = rb[e];  // B transposed: each column's k contiguous
    }}
  }};
"""


def _mainloop(s: HipGemmSchedule, tm: int, tn: int, row: str, kk: str) -> str:
    """The K loop: the next tile staged while this one's fragments feed the MFMAs, then the buffer swap."""
    return f"""  load(0);
  store(0);
  TR_SYNC();
  for (int kt = 0; kt < ktiles; ++kt) {{
    const int buf = kt & 1;
    if (kt + 1 < ktiles) load((kt + 1) * BK);
#pragma unroll
    for (int ks = 0; ks < BK; ks += 8) {{
      tr_frag a[{tm}], b[{tn}];
#pragma unroll
      for (int i = 0; i < {tm}; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          a[i].v[e] = As[buf][(wm * {tm * 32} + i * 32 + {row}) * LD + ks + {kk}];
#pragma unroll
      for (int j = 0; j < {tn}; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          b[j].v[e] = Bs[buf][(wn * {tn * 32} + j * 32 + {row}) * LD + ks + {kk}];
#pragma unroll
      for (int i = 0; i < {tm}; ++i)
#pragma unroll
        for (int j = 0; j < {tn}; ++j) tr_mfma_32x32x8(a[i], b[j], acc[i][j]);
    }}
    if (kt + 1 < ktiles) store(buf ^ 1);
    TR_SYNC();
  }}
"""


def _epilogue(tm: int, tn: int, row: str, drow: str) -> str:
    """Each accumulator register to its C element (alpha applied, rounded to 16 bits), inside the edges."""
    return f"""#pragma unroll
  for (int i = 0; i < {tm}; ++i)
#pragma unroll
    for (int j = 0; j < {tn}; ++j)
#pragma unroll
      for (int v = 0; v < 16; ++v) {{
        const int gm = m0 + wm * {tm * 32} + i * 32 + {drow};
        const int gn = n0 + wn * {tn * 32} + j * 32 + {row};
        if (gm < M && gn < N) C[(long long)gm * N + gn] = tr_from_float(alpha * TR_ACC(acc[i][j], v));
      }}
}}
"""


def grid(m: int, n: int, sched: HipGemmSchedule) -> tuple[int, int, int]:
    return ((n + sched.bn - 1) // sched.bn, (m + sched.bm - 1) // sched.bm, 1)
