"""The scaled GEMM: C[m, n] = (A[m, k] @ B[k, n]) with 8-bit A and B (int8, FP8 e4m3 or e5m2) and fp32 scales, the
form quantized LLM weights and activations take; and its suites.

Scales (``scale``), as cuBLASLt's and ``torch._scaled_mm``'s modes and DeepSeek-V3's fine-grained recipe name them:

- ``tensor``: one scale for A and one for B (``scale_a``, ``scale_b``: shape (1,));
- ``row``: one a row of A and one a column of B (shapes (m,) and (n,)), C = (A @ B) * sa[m] * sb[n];
- ``block128``: A's 1 x 128 blocks and B's 128 x 128 blocks (``scale_a`` (m, k/128), ``scale_b`` (k/128,
  ceil(n/128))); each 128-deep block's product is scaled and summed in fp32, so long K does not drift;
- ``none``: int8 only, the int32 accumulator itself (``torch._int_mm``'s function); ``out_dtype`` int32.

FP8 outputs (``out_dtype`` fp8e4m3 or fp8e5m2, from FP8 inputs), as cuBLASLt's D scale and amax and the delayed-scaling
recipes use them: the value v (scaled product, then the epilogue) times ``scale_out`` (shape (1,)), rounded to
nearest even and saturated to the type's finite range (NaN stays NaN); the kernel also writes ``amax`` (shape (1,),
fp32): the largest |v| over C, before ``scale_out``, so a caller can pick the next call's scale. ``amax`` is an
output passed as a buffer (``side_outputs``): its contents on entry are ignored. The epilogue's bias and residual
are bf16 there (``operand_dtype``).

B is given ``col`` (the default: n x k, K contiguous: ``nn.Linear``'s weight, and the operand FP8 tensor cores and
cuBLASLt read) or ``row`` (k x n). int8 products accumulate in int32, exactly while k x 128 x 128 fits (k <=
131071); FP8 ones in fp32. The reference decodes the stored values, applies the scales as stored (fp32, so
exactly) and computes in float64; the tolerance is the output's rounding (fp32: a few ulps of the scaling for int8,
and for FP8 the tensor cores' narrower sums, ``tolerance_bound``).

- ``llm-gemm-int8``: the llm-gemm projections (kernels/ops/gemm.py) in int8: on a CPU with row scales at M = 1, 16, 128
  into fp32; on a GPU the int32 accumulator at M = 128, 2048, 8192 (``torch._int_mm``'s function and sizes).
- ``llm-gemm-fp8``: the llm-gemm projections in FP8 e4m3 with row scales into bf16 at every llm-gemm M (GPU only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tracea.doctor.errors import BadInputError

from .. import fields
from ..dtypes import QUANTIZED, DType, parse_dtype, to_float64, to_storage
from ..epilogue import GELU_C0, GELU_C1, NUMPY, flops_per_element, parse_alpha, parse_chain, statements
from ..epilogue import apply as apply_epilogue
from ..op import Op, Suite, register
from .gemm import PROJECTIONS, TOKENS

SCALES = ("tensor", "row", "block128", "none")
BLOCK = 128  # block128's block depth (and B's block width)
FP8_OUT = (DType.FP8E4M3, DType.FP8E5M2)  # outputs quantized with scale_out, their amax written beside
OUT_TYPES = (DType.FP32, DType.BF16, DType.FP16, DType.INT32, *FP8_OUT)
INT8_MAX_K = (2**31 - 1) // (128 * 128)  # int32 accumulation of int8 products is exact up to here
LAYOUTS = ("col", "row")
# the spread of random FP8 inputs: normals times this, so values use the type's exponents without saturating
FP8_SPREAD = {DType.FP8E4M3: 64.0, DType.FP8E5M2: 1024.0}


def _llm(dtype: str, out: str, tokens: tuple[int, ...], projections: tuple[tuple[int, int], ...]) -> list[Any]:
    return [ScaledGemm(m=m, n=n, k=k, dtype=dtype, out_dtype=out, scale="row") for m in tokens for n, k in projections]


def _llm_int8(target: str, quick: bool) -> list[Any]:
    """A CPU's rows (M = 1, 16, 128 with row scales into fp32); a GPU's, the int32 accumulator itself (``torch._int_mm``'s
    function) at the prefill sizes ``_int_mm`` takes (M = 128, 2048, 8192: it refuses 16 rows or fewer)."""
    if target == "host":
        return _llm("int8", "fp32", (1, 16), ((4096, 4096),)) if quick else _llm("int8", "fp32", (1, 16, 128), PROJECTIONS)
    tokens, projections = ((2048,), ((4096, 4096),)) if quick else ((128, 2048, 8192), PROJECTIONS)
    return [ScaledGemm(m=m, n=n, k=k, dtype="int8", out_dtype="int32", scale="none") for m in tokens for n, k in projections]


def _llm_fp8(target: str, quick: bool) -> list[Any]:
    """A GPU's rows (FP8 e4m3 with row scales, per token and per output channel, into bf16: the serving recipe) at
    every llm-gemm M; none for a CPU (no FP8 arithmetic there)."""
    if target == "host":
        return []
    return _llm("fp8e4m3", "bf16", (1, 2048), ((4096, 4096),)) if quick else _llm("fp8e4m3", "bf16", TOKENS, PROJECTIONS)


LLM_GEMM_INT8 = Suite("llm-gemm-int8", "the llm-gemm projections in int8 (CPU: M = 1-128, row scales into fp32; GPU: "
                                       "M = 128-8192 into int32)", _llm_int8)
LLM_GEMM_FP8 = Suite("llm-gemm-fp8", "the llm-gemm projections in FP8 e4m3 with row scales into bf16 (GPU: M = 1-8192)",
                     _llm_fp8)


@register
@dataclass(frozen=True)
class ScaledGemm(Op):
    """C[m, n] = scaled(A[m, k] @ B[k, n]), 8-bit A and B; see the module's text for ``scale`` and ``layout_b``."""

    m: int
    n: int
    k: int
    dtype: DType = DType.INT8
    out_dtype: DType = DType.FP32
    scale: str = "row"
    layout_b: str = "col"
    epilogue: tuple[str, ...] = ()
    alpha: float = 1.0
    kind: ClassVar[str] = "scaled_gemm"
    phase: ClassVar[str] = "mma"
    aliases: ClassVar[tuple[str, ...]] = ("qgemm", "scaled-gemm")
    default_shape: ClassVar[dict[str, Any]] = {"m": 4096, "n": 4096, "k": 4096}
    order: ClassVar[int] = 15
    suites: ClassVar[tuple[Suite, ...]] = (LLM_GEMM_INT8, LLM_GEMM_FP8)

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, fields.positive(name, getattr(self, name)))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype, "dtype", QUANTIZED))
        object.__setattr__(self, "out_dtype", parse_dtype(self.out_dtype, "out_dtype", OUT_TYPES))
        if self.scale not in SCALES:
            raise BadInputError(f"scale: expected one of {', '.join(SCALES)}, got {self.scale!r}")
        if self.layout_b not in LAYOUTS:
            raise BadInputError(f"layout_b: expected 'col' (n x k) or 'row' (k x n), got {self.layout_b!r}")
        object.__setattr__(self, "epilogue", parse_chain(self.epilogue))
        object.__setattr__(self, "alpha", parse_alpha(self.alpha))
        raw = self.out_dtype is DType.INT32
        if raw != (self.scale == "none") or (raw and self.dtype is not DType.INT8):
            raise BadInputError(f"out_dtype {self.out_dtype.value} with scale {self.scale} and {self.dtype.value} inputs: "
                                "the int32 accumulator is an int8 GEMM's output without scales (scale none), and only "
                                "it; a scaled one is fp32, bf16 or fp16")
        if self.out_dtype in FP8_OUT and self.dtype not in FP8_OUT:
            raise BadInputError(f"out_dtype {self.out_dtype.value}: an FP8 output takes FP8 inputs (fp8e4m3, fp8e5m2); "
                                f"{self.dtype.value}'s scaled outputs are fp32, bf16 or fp16")
        if self.epilogue and raw:
            raise BadInputError(f"epilogue: {','.join(self.epilogue)} applies to a scaled output (fp32, bf16 or fp16), "
                                "not to the int32 accumulator")
        if self.scale == "block128" and self.k % BLOCK:
            raise BadInputError(f"k: {self.k} is not a multiple of {BLOCK}, the depth of block128's scale blocks")
        if self.dtype is DType.INT8 and self.k > INT8_MAX_K:
            raise BadInputError(f"k: {self.k} int8 products can overflow the int32 accumulator (at most {INT8_MAX_K})")
        fields.elements("A (m x k)", self.m, self.k)
        fields.elements("B (k x n)", self.k, self.n)
        fields.elements("C (m x n)", self.m, self.n)

    @property
    def output_dtype(self) -> DType:
        return self.out_dtype

    @property
    def fp8_out(self) -> bool:
        """C is FP8: quantized by ``scale_out``, its amax written beside (``side_outputs``)."""
        return self.out_dtype in FP8_OUT

    @property
    def operand_dtype(self) -> DType:
        """The epilogue operands' type (bias, residual): C's, or bf16 beside an FP8 C (cuBLASLt's bias type there)."""
        return DType.BF16 if self.fp8_out else self.out_dtype

    def side_outputs(self) -> dict[str, tuple[int, ...]]:
        """Buffers the kernel writes beside C, passed with the inputs (their contents on entry ignored): an FP8
        C's ``amax``."""
        return {"amax": (1,)} if self.fp8_out else {}

    def side_tolerance(self) -> float:
        """amax's bound: an fp32 C's from FP8 inputs (the tensor cores' accumulation, ``tolerance_bound``)."""
        return 2.0**-11

    def side_reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What ``side_outputs`` should hold after a call on ``inputs``: the largest |v| before ``scale_out``."""
        if not self.fp8_out:
            return {}
        return {"amax": np.array([np.max(np.abs(self._value(inputs)))])}

    def tolerance_bound(self) -> float:
        """0 for the int32 accumulator (exact); 8 units of a 16-bit output's rounding; in fp32, a few ulps of the
        scaling for int8 (1e-6), a block sum's fp32 additions for block128 (1e-5), and for FP8 the tensor cores'
        own accumulation: Hopper's FP8 MMA sums its products in fewer bits than fp32 (about 14, DeepSeek-V3's
        report; 1.3e-4 of the norm over 128 e4m3 products on an H200 even when every 128 are promoted to fp32,
        docs/device-runs/h200-fp8-int8-gemm/), so 2^-11 (4.9e-4), four such units."""
        if self.out_dtype is DType.INT32:
            return 0.0
        if self.fp8_out:  # the reference rounds as the kernel does: elements whose sums differ within the FP8
            return self.out_dtype.unit_roundoff / 4  # accumulation's error round apart, one code each (rare)
        if self.out_dtype is not DType.FP32:
            return 8 * self.out_dtype.unit_roundoff
        if self.dtype is not DType.INT8:
            return 2.0**-11
        return 1e-5 if self.scale == "block128" else 1e-6

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k + flops_per_element(self.epilogue) * self.m * self.n

    @property
    def bytes(self) -> int:
        """The fewest bytes a kernel moves: each input (and scale) read once, the output written once."""
        scales = sum(math.prod(s) for name, s in self.shapes().items() if name.startswith("scale"))
        extra = sum(math.prod(s) for name, s in self.epilogue_shapes().items()) * self.operand_dtype.itemsize
        return self.m * self.k + self.k * self.n + self.m * self.n * self.out_dtype.itemsize + 4 * scales + extra

    def scale_shapes(self) -> dict[str, tuple[int, ...]]:
        """The scales' shapes under ``scale``: none for ``none``."""
        if self.scale == "tensor":
            return {"scale_a": (1,), "scale_b": (1,)}
        if self.scale == "row":
            return {"scale_a": (self.m,), "scale_b": (self.n,)}
        if self.scale == "block128":
            kb = self.k // BLOCK
            return {"scale_a": (self.m, kb), "scale_b": (kb, -(-self.n // BLOCK))}
        return {}

    def output_scale_shapes(self) -> dict[str, tuple[int, ...]]:
        """An FP8 C's ``scale_out`` and its ``amax`` (written: ``side_outputs``); none for other outputs."""
        return {"scale_out": (1,), "amax": (1,)} if self.fp8_out else {}

    def epilogue_shapes(self) -> dict[str, tuple[int, ...]]:
        """The fused epilogue's operands, in ``operand_dtype``: ``bias`` (n,), ``residual`` (m, n), as the chain
        reads them."""
        s: dict[str, tuple[int, ...]] = {}
        if "bias" in self.epilogue:
            s["bias"] = (self.n,)
        if "residual" in self.epilogue:
            s["residual"] = (self.m, self.n)
        return s

    def shapes(self) -> dict[str, tuple[int, ...]]:
        b = (self.n, self.k) if self.layout_b == "col" else (self.k, self.n)
        return {"a": (self.m, self.k), "b": b, **self.scale_shapes(), **self.epilogue_shapes(),
                **self.output_scale_shapes()}

    def input_dtype(self, name: str) -> np.dtype:
        if name in ("bias", "residual"):
            return self.operand_dtype.storage
        return np.dtype(np.float32) if name.startswith("scale") or name == "amax" else self.dtype.storage

    def _values(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """8-bit operand values: int8 over its whole range (-128 included), FP8 normals spread over its
        exponents; never zero (a zero would hide a skipped element)."""
        if self.dtype is DType.INT8:
            x = rng.integers(-128, 128, size=shape, dtype=np.int8)
            x[x == 0] = 1
            return x
        x = to_storage(rng.standard_normal(shape) * FP8_SPREAD[self.dtype], self.dtype)
        x[(x & 0x7F) == 0] = 0x38  # +-0 -> 1.0 in e4m3 (0x38), 0.5 in e5m2: nonzero either way
        return x

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Operands and positive scales that bring each output near unit size whatever k is (a 16-bit output
        stays in range): each scale about 1 / (typical operand value x k^(1/4))."""
        typical = 74.0 if self.dtype is DType.INT8 else FP8_SPREAD[self.dtype]
        inputs = {name: self._values(rng, shape) for name, shape in self.shapes().items() if name in ("a", "b")}
        for name, shape in self.scale_shapes().items():
            u = rng.uniform(0.5, 1.5, size=shape)
            inputs[name] = (u / (typical * self.k ** 0.25)).astype(np.float32)
        for name, shape in self.epilogue_shapes().items():  # about the size of the scaled products
            inputs[name] = fields.random(rng, shape, self.operand_dtype, 1.0)
        if self.fp8_out:  # values of a few units to within a fraction of the range (saturation: tests of its own)
            inputs["scale_out"] = np.array([rng.uniform(0.5, 1.5) * self.out_dtype.max_finite / 16], np.float32)
            inputs["amax"] = np.zeros(1, np.float32)
        return inputs

    def check_scales(self, scales: dict[str, Any]) -> None:
        """Scales as a caller gives them (``tracea.ops.scaled_gemm``): each of ``scale_shapes``' shape (and
        ``scale_out``'s, where given), float32 and finite, or one line naming what is wrong."""
        wanted = {**self.scale_shapes(), **({"scale_out": (1,)} if "scale_out" in scales else {})}
        for name, shape in wanted.items():
            s = scales.get(name)
            if s is None:
                raise BadInputError(f"{name}: missing; scale {self.scale} takes {name} of shape {shape}")
            got = tuple(getattr(s, "shape", ()))
            if got != shape:
                raise BadInputError(f"{name}: shape {got}, expected {shape} for scale {self.scale}")
            values = np.asarray(s, dtype=np.float64)
            if not np.all(np.isfinite(values)):
                raise BadInputError(f"{name}: holds a non-finite value; scales must be finite")

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """The scaled product in float64, then the fused epilogue on it (its operands as stored); an FP8 C's is that
        times ``scale_out``, rounded and saturated as the kernel stores it (the values of its codes)."""
        v = self._value(inputs)
        if not self.fp8_out:
            return v
        so = float(np.asarray(inputs["scale_out"], dtype=np.float64).reshape(-1)[0])
        return to_float64(to_storage(v * so, self.out_dtype), self.out_dtype)

    def _value(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        c = self._scaled_reference(inputs)
        if not self.epilogue:
            return c
        extra = {k: to_float64(inputs[k], self.operand_dtype) for k in self.epilogue_shapes()}
        if "bias" in extra:
            extra["bias"] = extra["bias"][None, :]
        return apply_epilogue(self.epilogue, c, extra, self.alpha, NUMPY)

    def _scaled_reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        a = to_float64(inputs["a"], self.dtype)
        b = to_float64(inputs["b"], self.dtype)
        b = b.T if self.layout_b == "col" else b
        if self.scale == "none":
            return a @ b
        sa = np.asarray(inputs["scale_a"], dtype=np.float64)
        sb = np.asarray(inputs["scale_b"], dtype=np.float64)
        if self.scale == "tensor":
            return (a @ b) * sa[0] * sb[0]
        if self.scale == "row":
            return (a @ b) * sa[:, None] * sb[None, :]
        out = np.zeros((self.m, self.n))
        for kb in range(self.k // BLOCK):
            part = a[:, kb * BLOCK:(kb + 1) * BLOCK] @ b[kb * BLOCK:(kb + 1) * BLOCK]
            out += part * sa[:, kb, None] * np.repeat(sb[kb], BLOCK)[None, : self.n]
        return out

    def c_reference(self, epilogue: Any) -> str:
        """The function in plain C over the stored values as doubles (an exported package's example): the products
        summed in double, each 128-deep block scaled on its own for block128, the scales as given, then the fused
        epilogue (``epilogue``: the language's statement table)."""
        b = "b[j * K + p]" if self.layout_b == "col" else "b[p * N + j]"
        kb, nb = max(1, self.k // BLOCK), -(-self.n // BLOCK)
        scaled = {"none": "v", "tensor": "v * scale_a[0] * scale_b[0]", "row": "v * scale_a[i] * scale_b[j]",
                  "block128": "v"}[self.scale]
        if self.scale == "block128":
            body = f"""for (long q = 0; q < KB; ++q) {{
                double part = 0;
                for (long p = q * {BLOCK}; p < (q + 1) * {BLOCK}; ++p) part += a[i * K + p] * {b};
                v += part * scale_a[i * KB + q] * scale_b[q * NB + j / {BLOCK}];
            }}"""
        else:
            body = f"for (long p = 0; p < K; ++p) v += a[i * K + p] * {b};"
        epi = statements(self.epilogue, epilogue, bias="bias[j]", residual="residual[i * N + j]")
        return f"""enum {{ M = {self.m}, N = {self.n}, K = {self.k}, KB = {kb}, NB = {nb} }};
    const double alpha = {self.alpha!r}, GELU_C0 = {GELU_C0!r}, GELU_C1 = {GELU_C1!r};
    (void)alpha; (void)GELU_C0; (void)GELU_C1;
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {{
            double v = 0;
            {body}
            v = {scaled};
            {' '.join(epi)}
            ref[i * N + j] = v;
        }}"""

    def output_shape(self) -> tuple[int, ...]:
        return (self.m, self.n)

    def extent(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def case_label(self) -> str:
        """scaled_gemm 16x4096x4096 int8 row->fp32 (then the epilogue's ops: bias gelu)"""
        return (f"scaled_gemm {self.m}x{self.n}x{self.k} {self.dtype.value} {self.scale}->{self.out_dtype.value}"
                + "".join(f" {e}" for e in self.epilogue))

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        return f"{shape.get('m')}x{shape.get('n')}x{shape.get('k')} {shape.get('scale')}->{shape.get('out_dtype')}"
