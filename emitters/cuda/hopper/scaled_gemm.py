"""The Hopper 8-bit GEMM with scales (``cuda-wgmma.scaled_gemm``, sm_90a): FP8 (e4m3, e5m2) or int8 A and B
(``kernels/ops/scaled_gemm.py`` says what it computes), on the GEMM's parts: the TMA producer, the ring, the tile
walk (split-K included) and the consumers of ``mainloop.py``, the epilogue of ``epilogue.py``.

Bytes, not elements: 8-bit wgmma reads both operands K-major (it has no transposed form), so A is row-major and B
is given n x k (``layout_b`` "col": an ``nn.Linear`` weight, the operand cuBLASLt's FP8 GEMM reads). A 128-byte line
of k is then 128 8-bit values where the 16-bit GEMM has 64, and one m64nNk32 wgmma of 8-bit values reads the same
32 bytes of each line as one m64nNk16 of 16-bit ones. So the kernel's geometry is the bf16 GEMM's over the operands'
bytes taken two by two (``byte_view``: K/2 columns): its tensor maps (16-bit elements over K/2, the same boxes, the
128B swizzle moving the same 16-byte chunks), its k steps (one stage = 128 values of k), its tiles and split-K plans;
only the wgmma instruction (``ptx.wgmma_instruction_8bit``), the accumulators and the epilogue differ. K must be a
multiple of 16 (TMA's 16-byte rows; cuBLASLt asks the same of FP8).

- FP8 accumulates as cuBLASLt does by default and DeepSeek-V3's recipe prescribes: each k step's four wgmmas (128
  values of k) from zero, then added into fp32 registers (``promotion.py``), because the tensor cores' own FP8
  accumulation keeps fewer bits than fp32 over a long K. The step's products take registers beside the sums:
  ``fold_form`` picks two sets (a step issued while the last is added: 128 x 128 on two consumers), one, or one of
  half the columns (128 x 256), by what fits a consumer's registers (``check``).
- int8 accumulates exactly in s32 registers (``int`` accumulators; integer wgmma takes n of 8, 16, 24 and
  multiples of 16); without split-K (its fix-up sums fp32 partials).
- Scales: ``tensor`` multiplies by scale_a[0] * scale_b[0] (read once at the kernel's start), ``row`` by
  scale_a[row] * scale_b[col], ahead of the output's rounding: FP8's fp32 sums in place before the stores
  (``scale_pass``), int8's per element as the stores convert them; ``block128`` inside the
  mainloop, each k step's products times its 1 x 128 and 128 x 128 blocks' scales before they are added (the
  scales loaded ahead of the step's full-barrier wait); ``none`` (int8 -> int32) stores the accumulators.
- Outputs: bf16 and fp16 through the GEMM's stores (TMA or direct); fp32 and int32 by direct stores here
  (``WideStores``); FP8 (e4m3, e5m2) quantized by ``scale_out`` with its amax written, staged for the TMA store
  as byte pairs or stored directly (``fp8_out.py``). With ``swap`` (few rows of A: C^T = B^T A^T, ``gemm.kernel_op``) the scales swap roles.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from ...cstyle import CodeWriter
from ...gpu_epilogue import element_ops
from ..render import CudaRenderer, Rendered
from . import fp8_out, gemm
from .epilogue import Stores, operands, register_walk, swapped_elements
from .promotion import Fold
from .ptx import INT8_WIDTHS, wgmma_instruction_8bit
from .schedule import ADDRESS_REGS, SMEM_OPTIN_SM90, WgmmaSchedule, tile_count
from .schedule import hero_schedule as bf16_hero
from .space import search_space

PARAMS = ("tmA", "tmB", "tmC", "out", "scale_a", "scale_b", "M", "N", "K", "store_tma")
EPILOGUE_PARAMS = ("bias", "residual", "alpha")  # after the scales, in a kernel with a fused epilogue only
C_TYPES = {"bf16": "uint16_t", "fp16": "uint16_t", "fp32": "float", "int32": "int", "fp8e4m3": "unsigned char",
           "fp8e5m2": "unsigned char"}
BLOCK = 128  # block128's block, and the k of one stage (128 8-bit values)
AHEAD = 1  # two product sets: the next tile's steps issued before a tile is stored (``promotion._overlapped``)
BLOCK_AHEAD = 1  # block scales too (promotion._step loads each step's scales first): verified and sanitized on an H200,
# 0.3-0.5 % faster on three block128 rows (docs/device-runs/h200-fp8-int8-gemm/call24)


def byte_view(op: Any) -> Any:
    """The bf16 GEMM whose geometry the kernel runs: A (m x k/2) and B (n x k/2, K-major) as 16-bit pairs."""
    from tracea.kernels import Gemm

    return Gemm(m=op.m, n=op.n, k=op.k // 2, dtype="bf16", layout_a="row", layout_b="col")


def unsupported(op: Any) -> str | None:
    """Why the kernel cannot compute ``op`` as given (None: it can)."""
    if op.layout_b != "col":
        return ("B is k x n (row-major): 8-bit wgmma reads both operands K-major; give B as n x k (an nn.Linear "
                "weight, or w.T of one to tracea.ops.scaled_gemm)")
    if op.k % 16:
        return f"k = {op.k}: TMA reads 8-bit rows in 16-byte steps; K must be a multiple of 16 (as for cuBLASLt's FP8)"
    return None


def refusal(op: Any) -> str | None:
    """Why no schedule of the kernel computes ``op`` (its layout, K, int8 with block scales), for the planner
    (``Variant.refuses``: the next variant is ranked instead); None: a schedule can."""
    if getattr(op, "kind", None) != "scaled_gemm":
        return None
    if (why := unsupported(op)) is not None:
        return why
    if op.scale == "block128" and not promoted(op):
        return "int8 with block scales is not computed on the GPU (its exact int32 sums have no per-step promotion)"
    return None


def promoted(op: Any) -> bool:
    return op.dtype.value != "int8"


def check(op: Any, sched: WgmmaSchedule, smem_optin: int = SMEM_OPTIN_SM90) -> None:
    """``sched`` as the GEMM's over ``byte_view(op)``, and what the 8-bit kernel adds (``BadInputError``)."""
    if (why := unsupported(op)) is not None:
        raise UnsupportedError(f"cuda-wgmma.scaled_gemm: {why}")
    if op.scale == "block128" and not promoted(op):
        raise UnsupportedError("cuda-wgmma.scaled_gemm: int8 with block scales is not computed on the GPU (its exact "
                               "int32 sums have no per-step promotion to scale)", "--backend cpu, or row scales")
    sched.validate(byte_view(op), smem_optin)
    if op.dtype.value == "int8":
        if sched.bn not in INT8_WIDTHS:
            raise BadInputError(f"bn: integer wgmma takes n of {', '.join(map(str, INT8_WIDTHS[:5]))}... (multiples "
                                f"of 16 from 32), not {sched.bn}")
        if sched.split != 1:
            raise BadInputError("split: int8 accumulates in int32, and split-K's fix-up sums fp32 partials", "split 1")
    elif fold_form(sched) is None:
        raise BadInputError(f"bn: FP8 keeps a k step's products (of half the tile's columns at least) beside its "
                            f"{sched.accumulators} fp32 sums a thread; with addresses they exceed the "
                            f"{sched.register_split()[2]} registers of a consumer",
                            "at most 128 sums a thread: 128 x 256 cooperative on two consumers, 64-row tiles each "
                            "under ping-pong")
    if op.out_dtype.value not in ("bf16", "fp16") and sched.store == "tma" and \
            not (op.fp8_out and fp8_out.tma_ok(sched)):
        raise BadInputError(f"store: the TMA store stages 16-bit C (an FP8 C's pairs on unswapped tiles of 128-column "
                            f"multiples); this {op.out_dtype.value} C is stored directly", "store 'direct'")
    if op.scale == "block128" and (sched.swap or sched.bn not in (64, 128, 256) or sched.cluster_axis == "n"
                                   or sched.bn // (fold_form(sched) or (1, 1))[1] > BLOCK):
        raise BadInputError("bn: block128's tiles are folded in parts that lie within one 128-column scale block: "
                            "unswapped, 64, 128 or (two parts) 256 wide, never the empty tile past N of a pair along "
                            "N", "swap off, bn 128, cluster_axis 'm'")


def fold_form(sched: WgmmaSchedule) -> tuple[int, int] | None:
    """FP8's promotion for ``sched`` as (product sets, column parts), by what fits beside the sums in a consumer's
    registers (setmaxnreg's budget: ptxas allocates the consumers' branch under it): two sets where three times the
    accumulators fit without split-K (128 x 128 on two consumers: one step issued while the last is added), one set
    where twice them fit (128 x 192), one set of half the columns where 1.5 times them fit (128 x 256); None where
    none does."""
    budget, acc = sched.register_split()[2], sched.accumulators
    # (split-K's fix-up beside two sets spills: 576 bytes at 64 x 128 on one consumer, NVRTC 13.0)
    for sets, chunks in ((2, 1), (1, 1), (1, 2))[0 if sched.split == 1 else 1:]:
        if (sched.bn // chunks) % 8 == 0 and acc + sets * acc // chunks + ADDRESS_REGS <= budget:
            return sets, chunks
    return None


def _fold(op: Any, sched: WgmmaSchedule) -> Fold | None:
    """FP8's promotion (``fold_form``), with block128's scales of k step ``kk``: A's for the thread's two rows of
    each m64 slice, B's for each column part's 128-column block (``check`` keeps each part of a block-scaled tile 64
    or 128 wide, within one block; a part past N reads no scale)."""
    if not promoted(op):
        return None
    sets, chunks = fold_form(sched) or (1, 1)
    ahead = (AHEAD if op.scale != "block128" else BLOCK_AHEAD) if sets == 2 and sched.split == 1 and \
        not sched.pingpong else 0
    if op.scale != "block128":
        return Fold(chunks=chunks, buffers=sets, ahead=ahead)
    ms, width = sched.m_slices, sched.bn // chunks
    before = (f"for (int i = 0; i < {ms * 2}; ++i) {{  /* this thread's rows: A's block scales */\n"
              f"                    const int r = tm * {sched.bm} + part * {sched.wm} + warp * 16 + lane / 4 + (i >> 1) * 64"
              " + (i & 1) * 8;\n"
              "                    sa_k[i >> 1][i & 1] = r < M ? __ldg(scale_a + (int64_t)r * k_iters + kk) : 0.0f;\n"
              "                }\n"
              f"                for (int c = 0; c < {chunks}; ++c) {{  /* B's block of each part */\n"
              f"                    const int c0 = tn * {sched.bn} + c * {width};\n"
              f"                    sb_k[c] = c0 < N ? __ldg(scale_b + (int64_t)kk * ((N + {BLOCK - 1}) / {BLOCK}) + c0 / "
              f"{BLOCK}) : 0.0f;\n"
              "                }")
    return Fold(before=before, factor="sa_k[i][(j >> 1) & 1] * sb_k[c]", chunks=chunks, buffers=sets,
                names=("sa_k", "sb_k"), decl=f"float sa_k[{ms}][2], sb_k[{chunks}];", ahead=ahead)


def _dequant(op: Any, sched: WgmmaSchedule) -> tuple[str, ...]:
    """The scaling of ``v`` at the kernel's (``row``, ``col``), per element in the stores: int8's (its accumulators are
    ints) and FP8's row scales under split-K (``_per_element``); FP8's other accumulators are scaled in place before
    the stores instead (``scale_pass``)."""
    if (promoted(op) and not _per_element(op, sched)) or op.scale in ("none", "block128"):
        return ()
    if op.scale == "tensor":
        return ("v *= sab;",)
    a, b = ("col", "row") if sched.swap else ("row", "col")
    return (f"v *= (row < M && col < N) ? __ldg(scale_a + {a}) * __ldg(scale_b + {b}) : 0.0f;",)


def scale_pass(op: Any, sched: WgmmaSchedule) -> str:
    """FP8 with tensor or row scales: the tile's fp32 sums times their scales, in registers, once the mainloop (and
    split-K's fix-up) is done and before any store: the loads sit in a loop of their own, away from the stores'
    shared-memory asm, so they overlap. Row ``r`` of the kernel's tile and column ``c`` (C's, or C^T's under
    ``swap``, whose rows are B's and columns A's); a sum outside M x N is scaled by 0 (never stored)."""
    if not promoted(op) or op.scale not in ("tensor", "row") or _per_element(op, sched):
        return ""
    ms, groups = sched.m_slices, sched.bn // 8
    if op.scale == "tensor":
        return (f"#pragma unroll\nfor (int i = 0; i < {ms}; ++i) {{\n    #pragma unroll\n"
                f"    for (int j = 0; j < {4 * groups}; ++j) acc[i][j] *= sab;\n}}\n")
    row_scale, col_scale = ("scale_b", "scale_a") if sched.swap else ("scale_a", "scale_b")
    return f"""{{
float srow[{ms}][2];  /* the thread's rows' scales */
#pragma unroll
for (int i = 0; i < {ms}; ++i) {{
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
        const int r = row0 + i * 64 + h * 8;
        srow[i][h] = r < M ? __ldg({row_scale} + r) : 0.0f;
    }}
}}
#pragma unroll
for (int j = 0; j < {groups}; ++j) {{
    #pragma unroll
    for (int e = 0; e < 2; ++e) {{  /* each of the thread's columns' scales read once */
        const int c = col0 + j * 8 + e;
        const float sc = c < N ? __ldg({col_scale} + c) : 0.0f;
        #pragma unroll
        for (int i = 0; i < {ms}; ++i) {{
            #pragma unroll
            for (int h = 0; h < 2; ++h) acc[i][4 * j + 2 * h + e] *= srow[i][h] * sc;
        }}
    }}
}}
}}
"""


def _per_element(op: Any, sched: WgmmaSchedule) -> bool:
    """Row scales under split-K: scaled per element in the stores, as int8's, since the pass beside split-K's fix-up
    spills (8-32 bytes, NVRTC 13.0)."""
    return op.scale == "row" and sched.split != 1


@dataclass(frozen=True)
class ScaledStores:
    """The stores of the scaled kernel (``base``: the GEMM's ``Stores`` for a 16-bit C, ``WideStores`` for a 4-byte
    one, ``fp8_out.ByteStores`` for an FP8 one), with ``scale_pass`` placed ahead of them: ``tma`` is the first text the consumers place after the tile's
    ``row0``/``col0``."""

    base: Any
    pass_text: str = ""

    def tma(self, when: str) -> str:
        scaled = self.pass_text.replace("\n", "\n            ") if self.pass_text else ""
        return scaled + self.base.tma(when)

    def direct(self, groups: bool = False) -> str:
        return self.base.direct(groups)

    def drain(self) -> str:
        return self.base.drain()


@dataclass(frozen=True)
class WideStores:
    """Direct stores of a 4-byte C (fp32, or int32: the accumulators themselves) from the consumer's registers,
    predicated on M and N: two columns as one 8-byte store where N is even, element by element otherwise; under
    ``swap``, C^T's element (row, col) to ``C[col * M + row]``. No TMA store (``check``)."""

    sched: WgmmaSchedule
    ctype: str
    dequant: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()

    def tma(self, when: str) -> str:
        return ""

    def drain(self) -> str:
        return ""

    def _value(self, acc: str) -> list[str]:
        if self.ctype == "int":
            return [f"const int v = {acc};"]
        ops = element_ops(self.epilogue, operands(CudaRenderer(), "fp32", swap=self.sched.swap))
        return [f"float v = {acc};", *self.dequant, *ops]

    def direct(self, groups: bool = False) -> str:
        s = self.sched
        w = CodeWriter()
        register_walk(w, s)
        if s.swap:
            swapped_elements(w, self._value("acc[i][4 * j + 2 * h + e]"), "C[(int64_t)col * M + row] = v;")
        else:
            share = f" && i * {s.bn // 8} + j >= g0 && i * {s.bn // 8} + j < g1" if groups else ""
            pair = "float2" if self.ctype == "float" else "int2"
            w("            const int row = row0 + i * 64 + h * 8, c0 = col0 + j * 8;")
            w(f"            if (row < M && c0 < N{share}) {{")
            w(f"                {self.ctype} out[2];")
            w("                #pragma unroll")
            w("                for (int e = 0; e < 2; ++e) {")
            w("                    const int col = c0 + e < N ? c0 + e : c0;")
            for line in self._value("acc[i][4 * j + 2 * h + e]"):
                w("                    " + line)
            w("                    out[e] = v;")
            w("                }")
            w(f"                {self.ctype}* p = C + (int64_t)row * N + c0;")
            w(f"                if (c0 + 1 < N && (N & 1) == 0) *({pair}*)p = make_{pair}(out[0], out[1]);")
            w("                else { p[0] = out[0]; if (c0 + 1 < N) p[1] = out[1]; }")
            w("            }")
        w("        }")
        w("    }")
        w("}")
        return "            " + w.render().replace("\n", "\n            ") + "\n"


def render(op: Any, sched: WgmmaSchedule) -> str:
    """CUDA C++ (NVRTC, ``-arch=sm_90a``) of ``extern "C" tr_wgmma_gemm`` for ``op``: parameters ``(tmA, tmB, tmC,
    C, const float* scale_a, const float* scale_b, [const T* bias, const T* residual, float alpha,] [const float*
    scale_out, float* amax, unsigned* amax_ws,] int M, int N, int K, int store_tma)`` (T: the epilogue operands'
    type, C's or bf16 beside an FP8 C; the first bracket with a fused epilogue only, the second with an FP8 C) with
    M, N the kernel op's (exchanged under ``swap``) and K in byte pairs (``op.k / 2``); the launch as the GEMM's over
    ``byte_view``."""
    check(op, sched)
    view = byte_view(op)
    kop = gemm.kernel_op(view, sched)
    out, dtype = op.out_dtype.value, op.dtype.value
    r = CudaRenderer()
    title = (f"cuda-wgmma.scaled_gemm {sched.name}: {dtype} A row-major x B n x k, scale {op.scale}, C {out}"
             f"{', C^T stored transposed' if sched.swap else ''}; K in byte pairs")
    ct, ot = C_TYPES[out], C_TYPES[op.operand_dtype.value]
    fused = f"    const {ot}* __restrict__ bias, const {ot}* __restrict__ residual, float alpha,\n" if op.epilogue else ""
    signature = (f"    {ct}* __restrict__ C, const float* __restrict__ scale_a, const float* __restrict__ scale_b,\n"
                 f"{fused}{fp8_out.signature(op)}    int M, int N, int K, int store_tma")
    dequant, epi = _dequant(op, sched), tuple(op.epilogue)
    base: Any = Stores(sched, r, out, epi, dequant) if out in ("bf16", "fp16") else \
        fp8_out.ByteStores(sched, dequant, epi) if op.fp8_out else WideStores(sched, ct, dequant, epi)
    stores = ScaledStores(base, scale_pass(op, sched))
    prologue = "    const float sab = __ldg(scale_a) * __ldg(scale_b);  /* per-tensor scales */" \
        if op.scale == "tensor" else ""
    if op.fp8_out:
        prologue = "\n".join(filter(None, (prologue, fp8_out.prologue())))
    fold = _fold(op, sched)
    width = sched.bn // (fold.chunks if fold else 1)
    instruction = wgmma_instruction_8bit(width, dtype) + (fp8_out.device_code(op) if op.fp8_out else "")
    return gemm.compose(kop, sched, title, instruction, signature, stores,
                        acc="float" if promoted(op) else "int", fold=fold, prologue=prologue)


def rendered(op: Any, sched: WgmmaSchedule, sm_count: int) -> Rendered:
    """The CUDA emitter's ``Rendered`` for ``op``: the source, the GEMM's launch over ``byte_view(op)``, metadata."""
    src = render(op, sched)
    view = byte_view(op)
    grid, threads, smem = gemm.launch_geometry(view, sched, sm_count)
    k32 = "s32.s8.s8" if op.dtype.value == "int8" else f"f32.{op.dtype.value[3:]}"
    chunks = (fold_form(sched) or (1, 1))[1] if promoted(op) else 1
    meta = {
        "name": f"tr_scaled_{sched.name}",
        "tile": {"M": sched.bm, "N": sched.bn, "K": BLOCK, "stages": sched.stages, "consumers": sched.consumers,
                 "pingpong": sched.pingpong, "cluster": sched.cluster},
        "fragments": {"mma": f"wgmma.mma_async m64n{sched.bn // chunks}k32 {k32}", "dtype_in": op.dtype.value,
                      "dtype_acc": _acc_text(op, sched),
                      "load": "TMA cp.async.bulk.tensor.2d, 128B swizzle, 8-bit rows as 16-bit pairs"},
        "scales": op.scale, "out": op.out_dtype.value,
        **({"amax": "written (fp8_out.py)"} if op.fp8_out else {}),
        "launch": {"grid": [grid, 1, 1], "block": [threads, 1, 1], "dynamic_smem": smem, "persistent": sched.persistent},
    }
    params = params_of(op)
    if sched.split != 1:
        meta["split_k"] = gemm.split_plan(view, sched, sm_count).to_json()
        from .scheduler import TileScheduler

        params += TileScheduler(sched).params()
    if sched.swap:
        meta["swapped"] = {"computes": f"C^T ({op.n} x {op.m}) = B^T A^T", "stores": "C transposed"}
    return Rendered(f"tr_scaled_{sched.name}", gemm.KERNEL_NAME, src, params, (grid, 1, 1), (threads, 1, 1), smem, meta)


def kernel_scalars(op: Any, sched: WgmmaSchedule) -> dict[str, int]:
    """The kernel's integer arguments: the kernel op's M and N (exchanged under ``swap``) and K in byte pairs, as
    ``scaled_kernel`` passes them (an exported launcher passes these)."""
    kop = gemm.kernel_op(byte_view(op), sched)
    return {"M": kop.m, "N": kop.n, "K": op.k // 2, **({"alpha": op.alpha} if op.epilogue else {})}


def params_of(op: Any) -> tuple[str, ...]:
    """The kernel's parameters (``PARAMS``, with ``EPILOGUE_PARAMS`` after the scales where ``op`` fuses an
    epilogue, then ``fp8_out.PARAMS`` for an FP8 C: a kernel without them keeps the signature it had)."""
    return (PARAMS[:6] + (EPILOGUE_PARAMS if op.epilogue else ()) + (fp8_out.PARAMS if op.fp8_out else ())
            + PARAMS[6:])


def _acc_text(op: Any, sched: WgmmaSchedule) -> str:
    if not promoted(op):
        return "int32"
    sets, chunks = fold_form(sched) or (1, 1)
    how = f", {chunks} column parts" if chunks > 1 else (", two product sets" if sets > 1 else "")
    return f"fp32, promoted every 128 of k{how}"


def _width(m: int, int8: bool) -> int:
    """A swapped tile's columns for ``m`` rows of A: the next multiple of 8 (of integer wgmma's n for int8)."""
    w = -(-m // 8) * 8
    return next(n for n in INT8_WIDTHS if n >= w) if int8 else w


def hero_schedule(op: Any, sm_count: int = 132) -> WgmmaSchedule:
    """``_hero``'s schedule, an FP8 C's staged for the TMA store where its tile allows (``fp8_out.tma_ok``)."""
    s = _hero(op, sm_count)
    return dataclasses.replace(s, store="tma") if op.fp8_out and fp8_out.tma_ok(s) else s


def _hero(op: Any, sm_count: int) -> WgmmaSchedule:
    """The untuned schedule. Few rows (M <= 64, not block128): swapped operands, 64 of B's rows x M (rounded up) a
    tile, one consumer, 8 stages, split-K (FP8) where the tiles leave half the SMs idle. Otherwise FP8 takes 128 x
    128 tiles on two consumers with two product sets (``fold_form``; cuBLASLt's FP8 tile), 6 stages, or where those
    leave half the SMs idle over 16+ k steps 64 x 64 tiles unsplit where they fill more than half the SMs in one
    wave (tensor and row scales), else 64 x 128 tiles on one consumer with split-K; otherwise block scales
    with a 16-bit or FP8 C and N > 128 take 128 x 256 in two column parts, 4 stages (H200,
    docs/device-runs/h200-fp8-int8-gemm/); int8 the bf16 GEMM's hero for the byte view, unsplit."""
    int8 = op.dtype.value == "int8"
    store = "tma" if op.out_dtype.value in ("bf16", "fp16") else "direct"
    k_steps = -(-op.k // BLOCK)
    if op.m <= 64 and op.scale != "block128":
        s = WgmmaSchedule(bm=64, bn=_width(op.m, int8), stages=8, consumers=1, store=store, swap=True)
        if not int8 and 2 * tile_count(s, op.n, op.m) <= sm_count and k_steps >= 8:
            s = dataclasses.replace(s, split=0)
        return s
    if int8:
        base = bf16_hero(byte_view(op), sm_count)
        return dataclasses.replace(base, split=1, split_tail=False, split_fix="last", store=store)
    s = WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store=store)
    if 2 * tile_count(s, op.m, op.n) <= sm_count and k_steps >= 16:
        small = WgmmaSchedule(bm=64, bn=64, stages=12, consumers=1, store=store, l2_hint="first")
        if op.scale != "block128" and sm_count // 2 < tile_count(small, op.m, op.n) <= sm_count:
            # 64 x 64 unsplit in one wave (cuBLASLt's per-tensor tile there), two product sets, the stores
            # overlapped: 128 x 4096 x 4096 1.42x (row) and 0.98x (tensor) _scaled_mm, against 0.87x and 0.79x
            # for 64 x 128 split; at K = 11008 and 14336 1.64x and 1.70x against 1.23x and 1.31x (H200,
            # docs/device-runs/h200-fp8-int8-gemm/call21, call22). Only where they fill over half the SMs: fewer
            # blocks would each walk all of K where split-K's units fill them (not measured on 64 x 64)
            return small
        # 64-row tiles on one consumer, split: 128 x 4096 x 4096 0.86x cuBLASLt, against 0.77x split over 128 x 128
        return WgmmaSchedule(bm=64, bn=128, stages=5, consumers=1, store=store, split=0, l2_hint="first")
    if op.scale == "block128" and (store == "tma" or op.fp8_out) and op.n > 128:
        # block scales: 128 x 256 folded in two parts (one scale block each), 0.86x torch's block-scaled _scaled_mm
        # at 4096^3 against 0.78x for 128 x 128 with two product sets (H200); a 4-byte C's stores spill beside them
        return WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, store=store)
    return s


def search_space_scaled(op: Any, smem_optin: int = SMEM_OPTIN_SM90, sm_count: int = 132) -> list[WgmmaSchedule]:
    """The GEMM's space over ``byte_view(op)`` (TMA stores made direct for a 4-byte C, and for an FP8 C where the
    tile cannot stage it) kept where ``check`` passes,
    the hero first."""
    out = [hero_schedule(op, sm_count)]
    wide = op.out_dtype.value in ("fp32", "int32")
    for s in search_space(byte_view(op), smem_optin, sm_count):
        s = dataclasses.replace(s, store="direct") if wide or (op.fp8_out and not fp8_out.tma_ok(s)) else s
        try:
            check(op, s, smem_optin)
        except BadInputError:
            continue
        if s not in out:
            out.append(s)
    return out


def scaled_kernel(op: Any, artifact: Any, rendered_: Any, scalars: dict[str, Any]) -> Any:
    """The kernel object: the op's buffers (a, b, the scales, out) uploaded and checked as for every CUDA kernel;
    the launch builds the two operand maps over a and b as 16-bit pairs (``byte_view``), and C's for a TMA store."""
    from ..tma import GemmViewKernel, c_output_map, operand_maps, split_args

    view = byte_view(op)
    sched = WgmmaSchedule.from_json(artifact.schedule)

    class ScaledWgmmaKernel(GemmViewKernel):
        what = "cuda-wgmma.scaled_gemm"

        def upload(self, inputs: dict[str, Any]) -> None:
            super().upload(inputs)
            ptr = {name: int(self._dbuf[name].ptr) if name in self._dbuf else 0
                   for name in ("a", "b", "scale_a", "scale_b", "bias", "residual", "scale_out", "amax", "out")}
            ma, mb = operand_maps(view, sched, ptr["a"], ptr["b"])
            # (a 4-byte C's schedules store directly, ``check``: an empty map and the flag 0)
            mc, store_tma = fp8_out.tensor_map(op, sched, ptr["out"]) if op.fp8_out else \
                c_output_map(op.m, op.n, op.out_dtype.value, sched, ptr["out"])
            mnk = kernel_scalars(op, sched)
            fused = [ctypes.c_uint64(ptr["bias"]), ctypes.c_uint64(ptr["residual"]), ctypes.c_float(op.alpha)] \
                if op.epilogue else []
            self._wargs = [ma, mb, mc, ctypes.c_uint64(ptr["out"]), ctypes.c_uint64(ptr["scale_a"]),
                           ctypes.c_uint64(ptr["scale_b"]), *fused, *fp8_out.kernel_args(op, ptr, self),
                           ctypes.c_int(mnk["M"]), ctypes.c_int(mnk["N"]),
                           ctypes.c_int(mnk["K"]), ctypes.c_int(store_tma)] + split_args(self, self.rendered)

    return ScaledWgmmaKernel(op, artifact, rendered_, scalars, sched, view)
