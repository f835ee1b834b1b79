"""The GEMM: C[m, n] = epilogue(A[m, k] @ B[k, n]), with its fused epilogue, and its suite of the shapes
users bring.

- ``llm-gemm``: the projections of a 7-8B language model (Llama 2 7B: 4096x4096 attention, 4096 <-> 11008
  MLP; Llama 3 8B: 4096 <-> 14336 MLP) at M = 1 and 16 tokens (decode), 128, 2048 and 8192 (prefill).
  ``Gemm(m, n, k)`` with n the layer's output and k its input features. A CPU runs them in fp32 at decode
  and short prefill (M = 1, 16, 128); a GPU in bf16 at every M.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tracea.doctor.errors import BadInputError

from .. import fields
from ..dtypes import DType, parse_dtype, to_float64
from ..epilogue import GELU_C0, GELU_C1, NUMPY, flops_per_element, parse_alpha, parse_chain, statements
from ..epilogue import apply as apply_epilogue
from ..op import Op, Suite, register

LAYOUTS = ("row", "col")
PROJECTIONS = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336))  # (n, k)
TOKENS = (1, 16, 128, 2048, 8192)


def llm_gemms(dtype: str, tokens: Iterable[int] = TOKENS,
              projections: Iterable[tuple[int, int]] = PROJECTIONS) -> list[Any]:
    return [Gemm(m=m, n=n, k=k, dtype=dtype) for m in tokens for n, k in projections]


def _llm_gemm(target: str, quick: bool) -> list[Any]:
    if target == "host":
        return llm_gemms("fp32", tokens=(1, 16), projections=((4096, 4096),)) if quick else \
            llm_gemms("fp32", tokens=(1, 16, 128))
    return llm_gemms("bf16", tokens=(1, 2048), projections=((4096, 4096),)) if quick else llm_gemms("bf16")


LLM_GEMM = Suite("llm-gemm", "GEMMs of a 7-8B language model's projections, decode (M = 1, 16) to prefill "
                             "(M = 8192)", _llm_gemm)


@register
@dataclass(frozen=True)
class Gemm(Op):
    """C[m, n] = epilogue(A[m, k] @ B[k, n]). ``layout_a``/``layout_b``: "row" (k contiguous for A,
    n contiguous for B) or "col". Epilogue ops apply in order: bias (length n), relu, gelu (tanh),
    scale (by ``alpha``), residual (add an m x n tensor)."""

    m: int
    n: int
    k: int
    dtype: DType = DType.FP32
    layout_a: str = "row"
    layout_b: str = "row"
    epilogue: tuple[str, ...] = ()
    alpha: float = 1.0
    kind: ClassVar[str] = "gemm"
    phase: ClassVar[str] = "mma"
    default_shape: ClassVar[dict[str, Any]] = {"m": 4096, "n": 4096, "k": 4096}
    order: ClassVar[int] = 10
    suites: ClassVar[tuple[Suite, ...]] = (LLM_GEMM,)

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, fields.positive(name, getattr(self, name)))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        for name in ("layout_a", "layout_b"):
            if getattr(self, name) not in LAYOUTS:
                raise BadInputError(f"{name}: expected 'row' or 'col', got {getattr(self, name)!r}")
        object.__setattr__(self, "epilogue", parse_chain(self.epilogue))
        object.__setattr__(self, "alpha", parse_alpha(self.alpha))
        fields.elements("A (m x k)", self.m, self.k)
        fields.elements("B (k x n)", self.k, self.n)
        fields.elements("C (m x n)", self.m, self.n)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k + flops_per_element(self.epilogue) * self.m * self.n

    @property
    def bytes(self) -> int:
        """The fewest bytes a kernel moves: each input read once, the output written once."""
        size = self.dtype.itemsize
        total = (self.m * self.k + self.k * self.n + self.m * self.n) * size
        total += self.n * size if "bias" in self.epilogue else 0
        total += self.m * self.n * size if "residual" in self.epilogue else 0
        return total

    def shapes(self) -> dict[str, tuple[int, ...]]:
        s = {
            "a": (self.m, self.k) if self.layout_a == "row" else (self.k, self.m),
            "b": (self.k, self.n) if self.layout_b == "row" else (self.n, self.k),
        }
        if "bias" in self.epilogue:
            s["bias"] = (self.n,)
        if "residual" in self.epilogue:
            s["residual"] = (self.m, self.n)
        return s

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        # Scale so each dot product has unit variance whatever k is (fp16 stays in range).
        scale = 1.0 / math.sqrt(math.sqrt(self.k))
        return {name: fields.random(rng, shape, self.dtype, scale if name in ("a", "b") else 1.0)
                for name, shape in self.shapes().items()}

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        a = to_float64(inputs["a"], self.dtype)
        b = to_float64(inputs["b"], self.dtype)
        a = a if self.layout_a == "row" else a.T
        b = b if self.layout_b == "row" else b.T
        extra = {k: to_float64(inputs[k], self.dtype) for k in ("bias", "residual") if k in inputs}
        if "bias" in extra:
            extra["bias"] = extra["bias"][None, :]
        return apply_epilogue(self.epilogue, a @ b, extra, self.alpha, NUMPY)

    def extent(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def c_reference(self, epilogue: Mapping[str, str]) -> str:
        a = "a[i * K + p]" if self.layout_a == "row" else "a[p * M + i]"
        b = "b[p * N + j]" if self.layout_b == "row" else "b[j * K + p]"
        epi = statements(self.epilogue, epilogue, bias="bias[j]", residual="residual[i * N + j]")
        return f"""enum {{ M = {self.m}, N = {self.n}, K = {self.k} }};
    const double alpha = {self.alpha!r}, GELU_C0 = {GELU_C0!r}, GELU_C1 = {GELU_C1!r};
    (void)alpha; (void)GELU_C0; (void)GELU_C1;
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {{
            double v = 0;
            for (long p = 0; p < K; ++p) v += {a} * {b};
            {' '.join(epi)}
            ref[i * N + j] = v;
        }}"""

    def output_shape(self) -> tuple[int, ...]:
        return (self.m, self.n)

    def case_label(self) -> str:
        """gemm 1024x1024x1024 bf16 bias relu"""
        return f"gemm {self.m}x{self.n}x{self.k} {self.dtype.value}" + "".join(f" {e}" for e in self.epilogue)

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        return f"{shape.get('m')}x{shape.get('n')}x{shape.get('k')}"
