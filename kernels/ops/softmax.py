"""The row softmax (numerically stable, over the last axis of a rows x cols matrix) and its suite of the
shapes users bring.

- ``softmax``: attention rows (rows = batch x heads x sequence, cols = sequence, 128 to 32768, about 16M
  elements each; 4M on a CPU) and vocabulary rows (32000, Llama 2; 128256, Llama 3) at decode batch sizes;
  fp32 on a CPU, fp16 on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .. import fields
from ..dtypes import DType, parse_dtype, to_float64, to_storage
from ..op import Op, Suite, register

ATTENTION_COLS = (128, 512, 2048, 8192, 32768)
ATTENTION_ELEMENTS = 1 << 24
VOCABULARY = ((1, 128256), (16, 32000), (64, 128256))  # (rows = batch, cols = vocabulary)


def softmax_rows(dtype: str, attention_cols: Iterable[int] = ATTENTION_COLS,
                 vocabulary: Iterable[tuple[int, int]] = VOCABULARY,
                 elements: int = ATTENTION_ELEMENTS) -> list[Any]:
    rows = [Softmax(rows=max(1, elements // c), cols=c, dtype=dtype) for c in attention_cols]
    return rows + [Softmax(rows=r, cols=c, dtype=dtype) for r, c in vocabulary]


def _softmax(target: str, quick: bool) -> list[Any]:
    if target == "host":
        if quick:
            return softmax_rows("fp32", attention_cols=(1024,), vocabulary=((1, 32000),), elements=1 << 22)
        return softmax_rows("fp32", elements=1 << 22)
    if quick:
        return softmax_rows("fp16", attention_cols=(128, 8192), vocabulary=((1, 128256),))
    return softmax_rows("fp16")


SOFTMAX_SUITE = Suite("softmax", "attention rows (128 to 32768 columns) and vocabulary rows (32000, 128256)",
                      _softmax)


@register
@dataclass(frozen=True)
class Softmax(Op):
    """Row-wise softmax over the last axis of a rows x cols matrix, numerically stable."""

    rows: int
    cols: int
    dtype: DType = DType.FP32
    kind: ClassVar[str] = "softmax"
    plot_marker: ClassVar[str] = "^"
    phase: ClassVar[str] = "reduce"
    default_shape: ClassVar[dict[str, Any]] = {"rows": 4096, "cols": 4096}
    order: ClassVar[int] = 30
    suites: ClassVar[tuple[Suite, ...]] = (SOFTMAX_SUITE,)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", fields.positive("rows", self.rows))
        object.__setattr__(self, "cols", fields.positive("cols", self.cols))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        fields.elements("input (rows x cols)", self.rows, self.cols)

    @property
    def flops(self) -> int:
        # max, subtract, exp, sum, scale: 5 per element (an exp counted as one)
        return 5 * self.rows * self.cols

    @property
    def bytes(self) -> int:
        return 2 * self.rows * self.cols * self.dtype.itemsize

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {"x": (self.rows, self.cols)}

    def c_reference(self, epilogue: Mapping[str, str]) -> str:
        return f"""enum {{ ROWS = {self.rows}, COLS = {self.cols} }};
    for (long i = 0; i < ROWS; ++i) {{
        double mx = x[i * COLS], sum = 0;
        for (long j = 1; j < COLS; ++j) mx = x[i * COLS + j] > mx ? x[i * COLS + j] : mx;
        for (long j = 0; j < COLS; ++j) sum += exp(x[i * COLS + j] - mx);
        for (long j = 0; j < COLS; ++j) ref[i * COLS + j] = exp(x[i * COLS + j] - mx) / sum;
    }}"""

    def output_shape(self) -> tuple[int, ...]:
        return (self.rows, self.cols)

    def case_label(self) -> str:
        return f"softmax {self.rows}x{self.cols} {self.dtype.value}"

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        return f"{shape.get('rows')}x{shape.get('cols')}"

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        # A wide spread (and an offset) so that a kernel without the max subtraction overflows.
        x = rng.standard_normal((self.rows, self.cols), dtype=np.float32) * 4 + 40
        return {"x": to_storage(x, self.dtype)}

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        x = to_float64(inputs["x"], self.dtype)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
