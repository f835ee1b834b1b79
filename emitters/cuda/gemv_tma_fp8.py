"""FP8 decode GEMMs on the TMA-fed gemv (issue 35; ``gemv_tma.py``): what an 8-bit ScaledGemm changes in that kernel.

The kernel walks the operands as byte pairs (``scaled_gemm.byte_view``: the bf16 GEMM of K/2 columns), so its
ring, TMA boxes (128 bytes: 128 FP8 values of K), swizzle and ldmatrix addresses are the 16-bit kernel's. They
serve ``mma.sync``'s m16n8k32 with 8-bit operands unchanged: PTX lays out its fragments byte for byte as
m16n8k16's 16-bit ones (A: rows g and g + 8 at bytes 4q.. and 16 + 4q.. of a 32-byte k step; B: column g at the
same bytes), which ``tests/emitters/cuda/test_cuda_gemv_tma_fp8.py`` models. What differs: ``tr_mma`` (an m16n8k32
e4m3/e5m2), the scales (per tensor or per row of A and column of B) applied to each finished sum before the
epilogue, and C in bf16, fp16 or fp32 with bias and residual in C's type, or FP8 with its amax (``_fp8_c``; bias
and residual bf16).

sm_90 has no 8-bit ``mma.sync`` unit: ptxas unpacks each fragment to f16 pairs (``F2FP.F16.E4M3.UNPACK``) and runs
``HMMA.16816.F32`` twice (NVRTC 13.0's SASS). Every e4m3 and e5m2 value is an f16 value, so the products are exact
and summed in fp32 as the 16-bit kernel's: no drift over long K to promote against. The unpacked fragments take
registers: with four 8-row groups of A (17-32 rows) the kernel spills, so it runs at most 16 rows (``MAX_M``);
more take the wgmma tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..cstyle import Param
from ..gpu_epilogue import Dest, Operands, Walk, direct_store
from .render import CudaRenderer

MMA_8BIT = {"fp8e4m3": "e4m3", "fp8e5m2": "e5m2"}  # 8-bit types of mma.sync's m16n8k32 (sm_89+)


@dataclass(frozen=True)
class Io:
    """What the kernel's element type changes: its name's type, parameters (after the two maps) and their
    buffer names, the tensor-core helpers (``tr_mma``), and the store of a finished sum ``v`` of output (m, n)."""

    tag: str
    params: tuple[Param, ...]
    names: tuple[str, ...]
    prelude: str
    store: str
    head: tuple[str, ...] = ()  # lines before the reduction (an FP8 C's scale and the thread's amax: live only there)
    tail: tuple[str, ...] = ()  # lines at its end, in every block that stores (an FP8 C's launch amax)


MAX_M = 16  # rows of A: two 8-row groups (four spill, above)


def refusal(op: Any) -> str | None:
    """Why the gemv cannot run a scaled GEMM of few rows (None: it can): FP8 with per-tensor or per-row scales, B
    n x k (``nn.Linear``'s weight, ``torch._scaled_mm``'s layout), at most ``MAX_M`` rows."""
    if op.m > MAX_M:
        return f"computes at most {MAX_M} rows of an FP8 A, not {op.m} (the wgmma tiles run more)"
    if op.dtype.value not in MMA_8BIT:
        return f"computes FP8 (e4m3, e5m2), not {op.dtype.value} (int8 runs the wgmma tiles)"
    if op.scale not in ("tensor", "row"):
        return f"applies per-tensor or per-row scales, not {op.scale} (block scales run the wgmma tiles)"
    if op.layout_b != "col" or op.k % 16:
        return "B must be n x k with K a multiple of 16 (TMA's 16-byte rows)"
    return None


def io(op: Any, r: CudaRenderer, stores_end: str = "") -> Io:
    """The FP8 kernel's element type, parameters, helpers and store; an FP8 C (``fp8_out``) also its head and tail,
    ``stores_end`` the count of the launch's blocks that reach the kernel's end (those that store)."""
    if op.fp8_out:
        assert stores_end, "an FP8 C's amax counts the blocks that reach the kernel's end"
        return _fp8_c(op, r, stores_end)
    out, t = op.out_dtype.value, MMA_8BIT[op.dtype.value]
    to_f, from_f = r.converters(out) if out != "fp32" else ("", "")
    scale = "__ldg(scale_a) * __ldg(scale_b)" if op.scale == "tensor" else "__ldg(scale_a + m) * __ldg(scale_b + n)"
    ops = Operands(f"{to_f}(bias[n])", f"{to_f}(resid[(size_t)m * N + n])", preload=False)
    store = " ".join(direct_store(Walk((), element=(f"v *= {scale};",)), op.epilogue, ops,
                                  Dest("Cout[(size_t)m * N + n]", from_f)))
    params = (Param("Cout", out, True, False, True), Param("scale_a", "fp32", True, True, True),
              Param("scale_b", "fp32", True, True, True), Param("bias", out, True, True, True),
              Param("resid", out, True, True, True), Param("ws", "fp32", True, False, True), Param("alpha", "float"))
    return Io(f"{op.dtype.value}_{op.scale}_{out}", params,
              ("out", "scale_a", "scale_b", "bias", "residual", "workspace", "alpha"), prelude(r, t), store)


MMA8 = r"""/* FP8 (sm_89+; sm_90 runs it as F2FP unpacks to f16 and HMMA.16816.F32: exact products, fp32 sums). */
static __device__ __forceinline__ void tr_mma(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.T8.T8.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
"""


def prelude(r: CudaRenderer, t: str) -> str:
    """The 16-bit kernel's tensor-core helpers but its mma (ldmatrix moves 8-bit data as byte pairs), with
    ``tr_mma`` the m16n8k32 of 8-bit type ``t`` (e4m3, e5m2)."""
    return r.tensor_prelude("bf16", leave_out=("mma.sync",)) + MMA8.replace("T8", t)


def _fp8_c(op: Any, r: CudaRenderer, stores_end: str) -> Io:
    """An FP8 C (``hopper/fp8_out.py``'s function): each element's v raises the thread's amax, then v x scale_out
    is rounded and saturated into one byte (``tr_fp8q``); bias and residual bf16. At the end every warp of the
    blocks that stored (``stores_end`` of them; a split's other blocks left after parking their partials) raises
    the launch's amax word and counts itself in; the last writes ``amax`` and zeroes the two words."""
    from .hopper import fp8_out

    t = MMA_8BIT[op.dtype.value]
    to_f = r.converters("bf16")[0]
    scale = "__ldg(scale_a) * __ldg(scale_b)" if op.scale == "tensor" else "__ldg(scale_a + m) * __ldg(scale_b + n)"
    ops = Operands(f"{to_f}(bias[n])", f"{to_f}(resid[(size_t)m * N + n])", preload=False)
    store = " ".join(direct_store(Walk((), element=(f"v *= {scale};",)), op.epilogue, ops,
                                  Dest("Cout[(size_t)m * N + n]", "TR_FP8Q")))
    quantize = fp8_out.device_code(op) + """static __device__ __forceinline__ unsigned char tr_fp8q(float v, unsigned& amax_t, float so) {
    amax_t = max(amax_t, __float_as_uint(fabsf(v)));
    return (unsigned char)tr_fp8x2(v * so, 0.0f);
}
#define TR_FP8Q(v) tr_fp8q((v), amax_t, so)
"""
    params = (Param("Cout", "unsigned char", True, False, True), Param("scale_a", "fp32", True, True, True),
              Param("scale_b", "fp32", True, True, True), Param("bias", "bf16", True, True, True),
              Param("resid", "bf16", True, True, True), Param("scale_out", "fp32", True, True, True),
              Param("amax", "fp32", True, False, True), Param("amax_ws", "u32", True, False, True),
              Param("ws", "fp32", True, False, True), Param("alpha", "float"))
    head = ("    const float so = __ldg(scale_out);", "    unsigned amax_t = 0u;  /* this thread's largest |v|, as bits */")
    tail = tuple("    " + line for line in fp8_out.amax_arrival(f"({stores_end}) * (blockDim.x / 32u)"))
    return Io(f"{op.dtype.value}_{op.scale}_{op.out_dtype.value}", params,
              ("out", "scale_a", "scale_b", "bias", "residual", "scale_out", "amax", "amax_ws", "workspace", "alpha"),
              prelude(r, t) + quantize, store, head, tail)
