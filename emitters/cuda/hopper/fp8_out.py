"""FP8 outputs of the Hopper scaled GEMM (``scaled_gemm.py``; ``kernels/ops/scaled_gemm.py`` says what is computed):
C in e4m3 or e5m2, quantized by ``scale_out``, with the output's amax written beside it, as cuBLASLt's D scale and
amax pointers do and the delayed-scaling recipes read them.

- Stores (``ByteStores``). Each value ``v`` inside M x N (scaled, then the fused epilogue, whose bias and residual
  are bf16) raises the thread's amax, is multiplied by ``scale_out`` and rounded to nearest even, saturated to
  the type's finite range, two at a time by ``cvt.rn.satfinite.{e4m3,e5m2}x2.f32`` (its first source in the high
  byte). ``store="tma"`` (unswapped tiles of 128-column multiples, ``tma_ok``) stages each m64 slice's 128 columns
  as the 16-bit GEMM's 64 x 64 atom of byte pairs for a bulk tensor store through C's map over pairs
  (``tensor_map``); without a map (N odd or not a multiple of 16, C unaligned) and for direct schedules, tiles
  gather each 8-column group's codes in one lane of the quad by shuffles and store 8 bytes a lane (``_lines``:
  a warp's store covers 8 rows x 32 bytes, whole sectors); under ``swap`` (C^T's tile) a byte each at
  ``C[col * M + row]``.
- amax: a thread keeps the largest |v| as its fp32 bits (unsigned order is the magnitudes' order, and a NaN's
  bits, sign cleared, are above every number's: a NaN in C makes the amax NaN, as the reference's max does). After
  its last tile each consumer warp takes its lanes' largest (``__reduce_max_sync``), raises the launch's word in
  the kernel's scratch (``amax_ws``: zeroed when it is made) by ``atomicMax``, fences and counts itself in; the last
  warp of the launch to arrive reads the largest, writes ``amax[0]`` and leaves both words zero for the next launch
  (no memset between launches, none in a CUDA graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...cstyle import CodeWriter
from ...gpu_epilogue import element_ops
from ...layout import TileLayout
from ..render import CudaRenderer
from .epilogue import operands, register_walk, staged_stores, swapped_elements, tma_store_drain
from .schedule import ELEM_BYTES, SWIZZLE, WgmmaSchedule

PARAMS = ("scale_out", "amax", "amax_ws")  # after the scales (and a fused epilogue's), with an FP8 C only
SCRATCH_BYTES = 8  # amax_ws: the launch's largest |v| (as bits) and the count of consumer warps arrived
CVT = {"fp8e4m3": "e4m3x2", "fp8e5m2": "e5m2x2"}


def signature(op: Any) -> str:
    return ("    const float* __restrict__ scale_out, float* __restrict__ amax, unsigned* __restrict__ amax_ws,\n"
            if op.fp8_out else "")


def device_code(op: Any) -> str:
    """``tr_fp8x2(lo, hi)``: two fp32 values as two FP8 codes in a 16-bit word, ``lo`` in the low byte."""
    return f"""static __device__ __forceinline__ unsigned short tr_fp8x2(float lo, float hi) {{
    unsigned short d;
    asm("cvt.rn.satfinite.{CVT[op.out_dtype.value]}.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
}}
"""


def prologue() -> str:
    return ("    const float so = __ldg(scale_out);  /* C's quantization scale */\n"
            "    unsigned amax_t = 0u;  /* this thread's largest |v|, as fp32 bits */\n"
            "    (void)so; (void)amax_t;")


@dataclass(frozen=True)
class ByteStores:
    """The stores of an FP8 C, staged or direct (module text); ``dequant``: per-element scaling lines before the
    epilogue."""

    sched: WgmmaSchedule
    dequant: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()

    def tma(self, when: str) -> str:
        """``store="tma"`` (unswapped tiles of 128-column multiples): each m64 slice's 128 columns staged as the
        16-bit GEMM's 64 x 64 atom of byte pairs (128 codes a 128-byte row, the same 128B swizzle and 8 KiB), then
        one bulk tensor store through C's map over pairs (``tensor_map``); the direct stores where it is 0."""
        s = self.sched
        if s.store != "tma":
            return ""
        return staged_stores(s, CudaRenderer(), when, s.bn // 128, f"(i * {s.bn // 128} + a)", self._stage,
                             f"(tn * {s.bn} + a * 128) / 2, tm * {s.bm} + part * {s.wm} + i * 64")

    def _stage(self, w: CodeWriter) -> None:
        """One atom: the thread's two codes of each 8-column group (a pair column 4jj + q of the atom) as one
        16-bit shared store at the swizzled offset (the quad's 8 bytes of a row in one 16-byte chunk, the 8 rows
        of a warp's store in 8 chunks: no conflicts); only values inside M x N raise the amax."""
        lay = TileLayout(64, 64, ELEM_BYTES, "row", swizzle=SWIZZLE)
        r = CudaRenderer()
        ops = element_ops(self.epilogue, operands(r, "bf16", "inside"))
        w("#pragma unroll")
        w("for (int jj = 0; jj < 16; ++jj) {")
        w("    #pragma unroll")
        w("    for (int h = 0; h < 2; ++h) {")
        w("        const int row = row0 + i * 64 + h * 8, r_in = warp * 16 + lane / 4 + h * 8, c_in = jj * 4 + lane % 4;")
        w("        float out[2];")
        w("        #pragma unroll")
        w("        for (int e = 0; e < 2; ++e) {")
        w("            const int col = col0 + (a * 16 + jj) * 8 + e;")
        w("            const bool inside = row < M && col < N;")
        w("            float v = acc[i][4 * (a * 16 + jj) + 2 * h + e];")
        for line in (*self.dequant, *ops):
            w("            " + line)
        w("            if (inside) amax_t = max(amax_t, __float_as_uint(fabsf(v)));")
        w("            out[e] = v * so;")
        w("        }")
        w("        " + r.asm("st.shared.b16", addr=f"buf + {lay.c_offset('r_in', 'c_in')}",
                          value="tr_fp8x2(out[0], out[1])"))
        w("    }")
        w("}")

    def _value(self, acc: str) -> list[str]:
        ops = element_ops(self.epilogue, operands(CudaRenderer(), "bf16", swap=self.sched.swap))
        return [f"float v = {acc};", *self.dequant, *ops,
                "amax_t = max(amax_t, __float_as_uint(fabsf(v)));", "v *= so;"]

    def direct(self, groups: bool = False) -> str:
        """Under ``swap`` a byte an element at ``C[col * M + row]``; else ``_lines`` (unswapped tiles are 64, 128,
        192 or 256 columns wide: whole 32-column groups)."""
        s = self.sched
        if not s.swap:
            assert s.bn % 32 == 0, s.bn
            return self._lines(groups)
        w = CodeWriter()
        register_walk(w, s)
        swapped_elements(w, self._value("acc[i][4 * j + 2 * h + e]"),
                         "C[(int64_t)col * M + row] = (unsigned char)tr_fp8x2(v, 0.0f);")
        w("        }")
        w("    }")
        w("}")
        return "            " + w.render().replace("\n", "\n            ") + "\n"

    def _lines(self, groups: bool) -> str:
        """Eight bytes a lane: for each row and four 8-column groups j, the quad's lanes hold two codes of each
        group (columns 8j + 2q, +1: ``pr[t]`` for j = 4jj + t); four shuffles within the quad give lane q group
        4jj + q's eight codes (the pair of lane s at bytes 2s, 2s + 1), stored as one 8-byte word where C's rows
        and base allow (N and the address multiples of 8), byte by byte at the edge. Every lane shuffles; only the
        values inside M x N (and the split unit's share of groups) are computed, raise the amax and are stored."""
        s = self.sched
        share = (lambda j: f" && i * {s.bn // 8} + {j} >= g0 && i * {s.bn // 8} + {j} < g1") if groups else (lambda j: "")
        w = CodeWriter()
        w("#pragma unroll")
        w(f"for (int i = 0; i < {s.m_slices}; ++i) {{")
        w("    #pragma unroll")
        w("    for (int h = 0; h < 2; ++h) {")
        w("        const int row = row0 + i * 64 + h * 8, q = lane & 3, tc = col0 - 2 * q;")
        w("        #pragma unroll")
        w(f"        for (int jj = 0; jj < {s.bn // 32}; ++jj) {{")
        w("            unsigned pr[4];")
        w("            #pragma unroll")
        w("            for (int t = 0; t < 4; ++t) {")
        w("                const int j = 4 * jj + t;")
        w("                float out[2];")
        w("                #pragma unroll")
        w("                for (int e = 0; e < 2; ++e) {")
        w("                    const int col = col0 + j * 8 + e;")
        w("                    out[e] = 0.0f;")
        w(f"                    if (row < M && col < N{share('j')}) {{")
        for line in self._value("acc[i][4 * j + 2 * h + e]"):
            w("                        " + line)
        w("                        out[e] = v;")
        w("                    }")
        w("                }")
        w("                pr[t] = tr_fp8x2(out[0], out[1]);")
        w("            }")
        w("            unsigned long long line = 0ull;")
        w("            #pragma unroll")
        w("            for (int r = 0; r < 4; ++r) {  /* from lane q ^ r: its pair of group 4jj + q */")
        w("                const int src = q ^ r;")
        w("                const unsigned send = src == 0 ? pr[0] : src == 1 ? pr[1] : src == 2 ? pr[2] : pr[3];")
        w("                const unsigned got = __shfl_xor_sync(0xffffffffu, send, r);")
        w("                line |= (unsigned long long)(got & 0xffffu) << (16 * src);")
        w("            }")
        w("            const int c8 = tc + (4 * jj + q) * 8;")
        w(f"            if (row < M && c8 < N{share('4 * jj + q')}) {{")
        w("                unsigned char* p = C + (int64_t)row * N + c8;")
        w("                if (((N | (int)((size_t)C & 7)) & 7) == 0) *(unsigned long long*)p = line;")
        w("                else for (int b = 0; b < 8 && c8 + b < N; ++b) p[b] = (unsigned char)(line >> (8 * b));")
        w("            }")
        w("        }")
        w("    }")
        w("}")
        return "            " + w.render().replace("\n", "\n            ") + "\n"

    def drain(self) -> str:
        return tma_store_drain(self.sched) + "\n        " + "\n        ".join(
            amax_arrival(f"gridDim.x * gridDim.y * gridDim.z * {4 * self.sched.consumers}u"))


def amax_arrival(warps: str) -> list[str]:
    """The launch's amax, once every warp that stored has its own (``amax_t``): the warp's largest (a reduction),
    raised into the scratch word ``amax_ws[0]`` by ``atomicMax``; a fence, then a ticket on ``amax_ws[1]``; the warp
    whose ticket is ``warps`` - 1 (an unsigned expression: every warp of the launch that reaches this point)
    fences, writes ``amax[0]`` and zeroes both words. A protocol of its own (tests/emitters/cuda/
    test_split_arrival.py): warps, not blocks, arrive; none waits or leaves early. Also the TMA gemv's tail."""
    return ["{  /* the launch's amax (fp8_out.amax_arrival) */",
            "    const unsigned wmax = __reduce_max_sync(0xffffffffu, amax_t);",
            "    if (lane == 0) {",
            "        atomicMax(amax_ws, wmax);",
            "        __threadfence();",
            f"        if (atomicAdd(amax_ws + 1, 1u) == ({warps}) - 1u) {{",
            "            __threadfence();",
            "            amax[0] = __uint_as_float(atomicExch(amax_ws, 0u));",
            "            atomicExch(amax_ws + 1, 0u);",
            "        }",
            "    }",
            "}"]


def kernel_args(op: Any, ptr: dict[str, int], kernel: Any) -> list[Any]:
    """The launch's arguments for ``PARAMS`` (none without an FP8 C): the caller's scale_out and amax, and the
    kernel's own scratch, zeroed once (``_zeroed``)."""
    import ctypes

    if not op.fp8_out:
        return []
    ws = kernel._zeroed("amax_ws", SCRATCH_BYTES)
    return [ctypes.c_uint64(ptr["scale_out"]), ctypes.c_uint64(ptr["amax"]), ctypes.c_uint64(int(ws.ptr))]


def tma_ok(sched: WgmmaSchedule) -> bool:
    """An FP8 C's TMA store takes unswapped tiles of 128-column multiples (whole staging atoms of 128 codes)."""
    return not sched.swap and sched.bn % 128 == 0


def tensor_map(op: Any, sched: WgmmaSchedule, c_ptr: int) -> tuple[Any, int]:
    """C's map for the TMA store: the row-major m x n bytes as 16-bit pairs (n / 2 columns), where n is even (TMA's
    16-byte rows then ask n % 16 and an aligned C, ``c_output_map``); else none and the flag 0 (direct stores)."""
    from ..tma import _Map, c_output_map

    if op.n % 2:
        return _Map(), 0
    return c_output_map(op.m, op.n // 2, "bf16", sched, c_ptr)
