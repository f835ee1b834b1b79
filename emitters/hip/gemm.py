"""The HIP MFMA GEMM (issue 19): C = epilogue(A B) for bf16, fp16 or fp32 A (m x k) and B (k x n), each
row- or column-major, fp32 accumulation, C in the inputs' type, any m, n, k (loads past an edge read zeros,
stores past it are skipped). The epilogue is the IR's chain (kernels/epilogue.py: bias, relu, gelu, scale,
residual), applied to each fp32 accumulator before it is rounded and stored.

A workgroup of ``waves_m x waves_n`` 64-lane wavefronts computes a ``bm x bn`` tile; each wavefront a
``bm / waves_m x bn / waves_n`` sub-tile of 32x32 MFMA tiles (``v_mfma_f32_32x32x8bf16_1k`` / ``...f16`` /
``v_mfma_f32_32x32x2f32`` on gfx90a, their CDNA3 spellings on gfx942). K advances ``bk`` at a time through two LDS buffers: the next
tile is loaded into registers while this one is multiplied, then written to the other buffer. A is kept in
LDS as rows of k and B transposed (columns of k), so that each lane's four k values of an MFMA operand
are contiguous; rows are padded by ``pad`` elements against bank conflicts. Every fragment index comes
from emitters/hip/mfma.py's placement expressions.

The same body is rendered after an AMD prelude (hipcc) or an NVIDIA one (NVRTC, software MFMA with the
same placements; prelude.py), so its logic is verified on an NVIDIA GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError
from tracea.kernels import DType

from ..gpu_epilogue import Dest, Loop, Operands, Style, Walk, direct_store
from .mfma import INSTRUCTIONS, Mfma, c_expr
from .prelude import EPILOGUE
from .render import HipRenderer
from .schedule import kind_fields

KIND = "hip-mfma"  # the schedule JSON's "kind"
KERNEL = "tr_hip_gemm"
CONV_KERNEL = "tr_hip_conv2d"
DTYPES = ("bf16", "fp16", "fp32")


def instruction(dtype: str) -> Mfma:
    """The MFMA a ``dtype`` GEMM issues: 32x32x8 for 16-bit inputs (bf16 and fp16 place their operands the
    same way), 32x32x2 for fp32."""
    return INSTRUCTIONS["32x32x2_fp32" if dtype == "fp32" else f"32x32x8_{dtype}"]


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

    def to_json(self) -> dict[str, int | str]:
        return {"kind": KIND, "bm": self.bm, "bn": self.bn, "bk": self.bk, "waves_m": self.waves_m,
                "waves_n": self.waves_n, "pad": self.pad}

    @staticmethod
    def from_json(d: dict[str, Any]) -> HipGemmSchedule:
        return HipGemmSchedule(**kind_fields(d, KIND, HipGemmSchedule))

    def features(self, op: Any) -> dict[str, float]:
        """None beside the fields (``Schedule``)."""
        return {}

    def lds_bytes(self, dtype: str = "bf16") -> int:
        """The two LDS buffers of A and B. The NVIDIA prelude gives them as dynamic shared memory and adds its
        software MFMA's static scratch, 1 KiB a wavefront at most: every valid schedule runs there."""
        return 2 * DType(dtype).itemsize * (self.bm + self.bn) * (self.bk + self.pad)

    def validate(self, op: Any = None, target: Any = None) -> None:
        """The fields, for ``op``'s dtype (bf16 without an op); the target does not enter."""
        self.validate_dtype(op.dtype.value if op is not None else "bf16")

    def validate_dtype(self, dtype: str = "bf16") -> None:
        """``BadInputError`` for fields that do not build a ``dtype`` kernel (tiles, wavefronts, pad, LDS)."""
        if min(self.bm, self.bn, self.bk, self.waves_m, self.waves_n) < 1:
            raise BadInputError(f"{self.name}: tile sizes and wavefront counts must be positive")
        if self.bm % (32 * self.waves_m) or self.bn % (32 * self.waves_n):
            raise BadInputError(f"{self.name}: each wavefront's tile must be whole 32x32 MFMA tiles")
        if self.bk % 8 or not 8 <= self.bk <= 64:
            raise BadInputError(f"bk: {self.bk} is not a multiple of 8 (the 16-bit MFMA's k) in 8..64")
        if not 1 <= self.waves <= 15:
            raise BadInputError(f"waves: {self.waves} wavefronts (1..15: the NVIDIA prelude's named barriers)")
        for what, n in (("A", self.bm), ("B", self.bn)):
            if (n * self.bk) % self.threads:
                raise BadInputError(f"{what}'s {n}x{self.bk} tile does not divide over {self.threads} threads")
        step = 1 if dtype == "fp32" else 4  # a 16-bit fragment (4 values) is one 8-byte read: rows 8-byte aligned
        if self.pad < 0 or self.pad % step or self.pad > 64:
            raise BadInputError(f"pad: {self.pad} is not a multiple of {step} element{'s' if step > 1 else ''} in 0..64"
                                + ("" if step == 1 else " (8-byte fragment reads)"))
        if self.lds_bytes(dtype) > 64 * 1024:
            raise BadInputError(f"{self.name}: two LDS buffers of A and B take {self.lds_bytes(dtype)} B in {dtype}, "
                                "over the 64 KiB a CDNA workgroup has")


# What differs between the GEMM and the implicit-GEMM conv: the signature (the conv derives M, N, K from its
# shape) and how one element of A and of B is read (zero past an edge, or in the conv's padding). ``T`` is
# the element type; the epilogue's operands (Bias: n, Res: m x n) are null when the chain does not read them.
def _gemm(layout_a: str, layout_b: str) -> dict[str, str]:
    a = "A[(long long)gk * M + gm]" if layout_a == "col" else "A[(long long)gm * K + gk]"
    b = "B[(long long)gn * K + gk]" if layout_b == "col" else "B[(long long)gk * N + gn]"
    return {
        "signature": HipRenderer().kernel(KERNEL, "THREADS", POINTERS + (("Res", False),),
                                          ("M", "N", "K", "alpha:float")),
        "a": f"(gm < M && gk < K) ? {a} : (T)0",
        "b": f"(gk < K && gn < N) ? {b} : (T)0",
        # 16-byte loads of TR_VEC consecutive k: row-major A, K a multiple of TR_VEC, A 16-byte aligned
        "a_vec_ok": "false" if layout_a == "col" else
                    "K % TR_VEC == 0 && (reinterpret_cast<unsigned long long>(A) & 15ull) == 0",
        "a_vec": """if (gm < M && gk < K) dst = *reinterpret_cast<const tr_vec16*>(A + (long long)gm * K + gk);
        else dst = tr_vec16{};""",
    }


POINTERS = (("A", False), ("B", False), ("C", True), ("Bias", False))
CONV_SCALARS = ("nb", "h", "w", "c", "p", "q", "N", "r", "s", "sh", "sw", "ph", "pw", "dh", "dw")
# NHWC input (nb x h x w x c), KRSC filter (N = k rows of K = r*s*c, B = its transpose), NPQK output
CONV = {
    "signature": HipRenderer().kernel(CONV_KERNEL, "THREADS", POINTERS, CONV_SCALARS) + """
  const int M = nb * p * q, K = r * s * c;
  const float alpha = 1.0f;
  const T* __restrict__ Res = nullptr;""",
    "a": """[&]() -> T {
        if (gm >= M || gk >= K) return (T)0;
        const int img = gm / (p * q), pq = gm % (p * q), rr = gk / (s * c), sc = gk % (s * c);
        const int y = (pq / q) * sh - ph + rr * dh, x = (pq % q) * sw - pw + (sc / c) * dw;
        if (y < 0 || y >= h || x < 0 || x >= w) return (T)0;
        return A[(((long long)img * h + y) * w + x) * c + sc % c];
      }()""",
    "b": "(gk < K && gn < N) ? B[(long long)gn * K + gk] : (T)0",
    # 16-byte loads of TR_VEC consecutive channels of one pixel: c a multiple of TR_VEC, A 16-byte aligned
    "a_vec_ok": "c % TR_VEC == 0 && (reinterpret_cast<unsigned long long>(A) & 15ull) == 0",
    "a_vec": """dst = tr_vec16{};
        if (gm < M && gk < K) {
          const int img = gm / (p * q), pq = gm % (p * q), rr = gk / (s * c), sc = gk % (s * c);
          const int y = (pq / q) * sh - ph + rr * dh, x = (pq % q) * sw - pw + (sc / c) * dw;
          if (y >= 0 && y < h && x >= 0 && x < w)
            dst = *reinterpret_cast<const tr_vec16*>(A + (((long long)img * h + y) * w + x) * c + sc % c);
        }""",
}


def render(dtype: str, sched: HipGemmSchedule, target: str, problem: str = "gemm", chain: tuple[str, ...] = (),
           layout_a: str = "row", layout_b: str = "row") -> str:
    """The kernel source for ``target`` ("amd": hipcc, "nvidia": NVRTC with the software MFMA); ``problem``
    "gemm" (kernel ``tr_hip_gemm``) or "conv" (``tr_hip_conv2d``, implicit GEMM over NHWC); ``chain`` the
    epilogue's ops in order (kernels/epilogue.py)."""
    if dtype not in DTYPES:
        raise BadInputError(f"dtype: the HIP MFMA GEMM takes {', '.join(DTYPES)}, not {dtype}")
    if layout_a not in ("row", "col") or layout_b not in ("row", "col"):
        raise BadInputError(f"layouts: row or col, not {layout_a}/{layout_b}")
    unknown = [e for e in chain if e not in EPILOGUE]
    if unknown:
        raise BadInputError(f"epilogue: the HIP GEMM has no {', '.join(unknown)}")
    sched.validate_dtype(dtype)
    kind = _gemm(layout_a, layout_b) if problem == "gemm" else CONV
    return HipRenderer().prelude(target, dtype, sched.waves) + _body(sched, kind, instruction(dtype), chain)


def _body(s: HipGemmSchedule, kind: dict[str, str], mf: Mfma, chain: tuple[str, ...]) -> str:
    """The kernel: its signature and accumulators, then the staging, main loop and epilogue."""
    tm, tn = s.bm // s.waves_m // 32, s.bn // s.waves_n // 32
    a_per, b_per = s.bm * s.bk // s.threads, s.bn * s.bk // s.threads
    row, kk = c_expr(mf.a_row("lane")), c_expr(mf.a_k("lane", "e"))
    drow = c_expr(mf.d_row("lane", "reg"))
    ld = s.bk + s.pad
    return f"""
#define BM {s.bm}
#define BN {s.bn}
#define BK {s.bk}
#define LD {ld}
#define THREADS {s.threads}
typedef tr_elem T;
{kind["signature"]}
  TR_LDS(T, As, 2, BM * LD, 0);
  TR_LDS(T, Bs, 2, BN * LD, 2 * BM * LD * sizeof(T));
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
""" + _staging(s, a_per, b_per, kind, DType(mf.dtype).itemsize) + _mainloop(s, tm, tn, row, kk, mf) + _epilogue(tm, tn, row, drow, chain)


def a_staging(s: HipGemmSchedule, esize: int) -> tuple[bool, int]:
    """How A is staged for elements of ``esize`` bytes: (16-byte global loads where A's rows allow, the bytes
    of one LDS store). A thread's k run in 16-byte groups when its count and bk divide into them; the LDS
    store is then 8 bytes (ds_write_b64) where LDS rows start on 8 bytes, else one element."""
    vec = 16 // esize
    a_per = s.bm * s.bk // s.threads
    grouped = a_per % vec == 0 and s.bk % vec == 0
    return grouped, 8 if grouped and (s.bk + s.pad) * esize % 8 == 0 else esize


def _words(esize: int, g: str) -> list[str]:
    """The four 32-bit words of 16-byte group ``g`` of A (``ra4[g]``), as C expressions."""
    return [f"ra4[{g}].{c}" for c in "xyzw"]


def _element(esize: int, g: str, e: int) -> str:
    """Element ``e`` of group ``g``, taken out of its word (no address of a private array is taken, so the
    groups stay in registers)."""
    word = _words(esize, g)[e * esize // 4]
    if esize == 4:
        return f"__uint_as_float({word})"
    return f"(unsigned short)({word} >> {16 * (e % 2)})"


def _a_grouped(s: HipGemmSchedule, a_per: int, kind: dict[str, str], esize: int, wide_store: bool) -> tuple[str, str]:
    """A's load and store in 16-byte groups held as ``tr_vec16 ra4[]``: one 16-byte load a group where the
    kernel's run-time check allows, else its elements one at a time, packed into the group's words."""
    vec = 16 // esize
    scalars = "\n".join(f"""        {{
          const int gk = gk0 + {e};
          x[{e}] = {kind["a"]};
        }}""" for e in range(vec))
    words = (", ".join(f"__float_as_uint(x[{i}])" for i in range(4)) if esize == 4 else
             ", ".join(f"(unsigned)x[{2 * i}] | ((unsigned)x[{2 * i + 1}] << 16)" for i in range(4)))
    load = f"""#pragma unroll
    for (int g = 0; g < {a_per // vec}; ++g) {{
      const int f = tid * {a_per} + g * TR_VEC;  // (names that cannot shadow a conv's shape: r, s, c, ...)
      const int gm = m0 + f / BK, gk0 = k0 + f % BK;
      if (a_vec) {{
        const int gk = gk0;
        tr_vec16& dst = ra4[g];
        {kind["a_vec"]}
      }} else {{
        T x[TR_VEC];
{scalars}
        ra4[g] = tr_vec16{{{words}}};
      }}
    }}"""
    if wide_store:
        store = f"""#pragma unroll
    for (int g = 0; g < {a_per // vec}; ++g) {{  // 8 bytes at a time: ds_write_b64
      const int f = tid * {a_per} + g * TR_VEC;
      T* row = &As[buf][(f / BK) * LD + f % BK];
      *reinterpret_cast<tr_vec8*>(row) = tr_vec8{{ra4[g].x, ra4[g].y}};
      *reinterpret_cast<tr_vec8*>(row + {8 // esize}) = tr_vec8{{ra4[g].z, ra4[g].w}};
    }}"""
    else:
        elems = "\n".join(f"      row[{e}] = {_element(esize, 'g', e)};" for e in range(vec))
        store = f"""#pragma unroll
    for (int g = 0; g < {a_per // vec}; ++g) {{
      const int f = tid * {a_per} + g * TR_VEC;
      T* row = &As[buf][(f / BK) * LD + f % BK];
{elems}
    }}"""
    return load, store


def _staging(s: HipGemmSchedule, a_per: int, b_per: int, kind: dict[str, str], esize: int) -> str:
    """Global to registers (``load``, zeros past the edges) and registers to LDS (``store``)."""
    grouped, store_bytes = a_staging(s, esize)
    if grouped:
        a_load, a_store = _a_grouped(s, a_per, kind, esize, store_bytes == 8)
        a_regs = f"tr_vec16 ra4[{a_per * esize // 16}];"
    else:
        a_load = f"""#pragma unroll
    for (int e = 0; e < {a_per}; ++e) {{
      const int f = tid * {a_per} + e;  // (names that cannot shadow a conv's shape: r, s, c, ...)
      const int gm = m0 + f / BK, gk = k0 + f % BK;
      ra[e] = {kind["a"]};
    }}"""
        a_store = f"""#pragma unroll
    for (int e = 0; e < {a_per}; ++e) {{
      const int f = tid * {a_per} + e;
      As[buf][(f / BK) * LD + f % BK] = ra[e];
    }}"""
        a_regs = f"T ra[{a_per}];"
    return f"""  {a_regs}
  T rb[{b_per}];
  const int ktiles = (K + BK - 1) / BK;
  const bool a_vec = {kind["a_vec_ok"] if grouped else "false"};  // the same for every thread: no divergence
  // staging: thread tid holds {a_per} consecutive k of one A row (16-byte loads where A's rows allow), and
  // B's n = tid, tid + THREADS, ... of its k rows (the transposed LDS store is then 2-way in 16 bits and
  // conflict-free in fp32 by the CDNA bank model, emitters/hip/lds_banks.py, where consecutive n a thread
  // took 4- to 8-way)
  auto load = [&](int k0) {{
    {a_load.strip()}
#pragma unroll
    for (int e = 0; e < {b_per}; ++e) {{
      const int f = e * THREADS + tid;
      const int gk = k0 + f / BN, gn = n0 + f % BN;
      rb[e] = {kind["b"]};
    }}
  }};
  auto store = [&](int buf) {{
    {a_store.strip()}
#pragma unroll
    for (int e = 0; e < {b_per}; ++e) {{
      const int f = e * THREADS + tid;
      Bs[buf][(f % BN) * LD + f / BN] = rb[e];  // B transposed: each column's k contiguous
    }}
  }};
"""


def _mainloop(s: HipGemmSchedule, tm: int, tn: int, row: str, kk: str, mf: Mfma) -> str:
    """The K loop: the next tile staged while this one's fragments feed the MFMAs, then the buffer swap.
    ``kk`` is the k of a lane's element ``e``; its elements are consecutive, so the read starts at e = 0."""
    k0 = kk.replace("e)", "0)")
    assert k0 != kk, kk  # the placement expression ends in "+ e)"
    return f"""  load(0);
  store(0);
  TR_SYNC();
  for (int kt = 0; kt < ktiles; ++kt) {{
    const int buf = kt & 1;
    if (kt + 1 < ktiles) load((kt + 1) * BK);
#pragma unroll
    for (int ks = 0; ks < BK; ks += {mf.k}) {{
      tr_frag a[{tm}], b[{tn}];
#pragma unroll
      for (int i = 0; i < {tm}; ++i)  // a lane's {mf.per_lane} consecutive k: one LDS read (ds_read_b{32 * mf.input_registers})
        a[i] = *reinterpret_cast<const tr_frag*>(&As[buf][(wm * {tm * 32} + i * 32 + {row}) * LD + ks + {k0}]);
#pragma unroll
      for (int j = 0; j < {tn}; ++j)
        b[j] = *reinterpret_cast<const tr_frag*>(&Bs[buf][(wn * {tn * 32} + j * 32 + {row}) * LD + ks + {k0}]);
#pragma unroll
      for (int i = 0; i < {tm}; ++i)
#pragma unroll
        for (int j = 0; j < {tn}; ++j) tr_mfma(a[i], b[j], acc[i][j]);
    }}
    if (kt + 1 < ktiles) store(buf ^ 1);
    TR_SYNC();
  }}
"""


def _epilogue(tm: int, tn: int, row: str, drow: str, chain: tuple[str, ...]) -> str:
    """Each accumulator register to its C element (``gpu_epilogue.direct_store``) through the epilogue's
    chain, rounded to the element type, inside the edges."""
    walk = Walk((Loop(f"for (int i = 0; i < {tm}; ++i)", braces=False), Loop(f"for (int j = 0; j < {tn}; ++j)", braces=False),
                 Loop("for (int reg = 0; reg < 16; ++reg)", (f"const int gm = m0 + wm * {tm * 32} + i * 32 + {drow};",
                                                             f"const int gn = n0 + wn * {tn * 32} + j * 32 + {row};",
                                                             "if (gm >= M || gn >= N) continue;"))),
                ("float v = TR_ACC(acc[i][j], reg);", *(() if chain else ("",))))  # no chain: an empty line
    ops = Operands("tr_to_float(Bias[gn])", "tr_to_float(Res[(long long)gm * N + gn])", preload=False)
    dest = Dest("C[(long long)gm * N + gn]", "tr_from_float")
    return "\n".join(direct_store(walk, chain, ops, dest, Style(depth=1, pragma_left=True))) + "\n}\n"


def grid(m: int, n: int, sched: HipGemmSchedule) -> tuple[int, int, int]:
    return ((n + sched.bn - 1) // sched.bn, (m + sched.bm - 1) // sched.bm, 1)
