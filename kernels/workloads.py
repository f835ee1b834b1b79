"""The shapes users bring, as named suites of ops: what ``tracea bench`` measures when no operation is named.

- ``llm-gemm``: the projections of a 7-8B language model (Llama 2 7B: 4096x4096 attention, 4096 <-> 11008
  MLP; Llama 3 8B: 4096 <-> 14336 MLP) at M = 1 and 16 tokens (decode), 128, 2048 and 8192 (prefill).
  ``Gemm(m, n, k)`` with n the layer's output and k its input features.
- ``resnet50``: every distinct convolution of ResNet-50 (torchvision's v1.5, the stride on the 3x3 of a
  bottleneck): the 7x7 stem, then per stage the 1x1 reduce, 3x3, 1x1 expand, the strided 3x3 and 1x1
  downsample of the first block. 23 shapes, at batch 1 and 32.
- ``softmax``: attention rows (rows = batch x heads x sequence, cols = sequence, 128 to 32768, about 16M
  elements each) and vocabulary rows (32000, Llama 2; 128256, Llama 3) at decode batch sizes.

A backend picks the dtypes and the batch sizes its users run (``emitters/<backend>/suite.py``); ``quick``
subsets keep a few rows of each for CI.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .ops import Conv2d, Gemm, Softmax

SUITES = ("llm-gemm", "resnet50", "softmax")
SUMMARY = {
    "llm-gemm": "GEMMs of a 7-8B language model's projections, decode (M = 1, 16) to prefill (M = 8192)",
    "resnet50": "every distinct convolution of ResNet-50, NHWC",
    "softmax": "attention rows (128 to 32768 columns) and vocabulary rows (32000, 128256)",
}

PROJECTIONS = ((4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336))  # (n, k)
TOKENS = (1, 16, 128, 2048, 8192)

# (c, h=w, k, r=s, stride, padding) of each distinct ResNet-50 convolution, in network order
RESNET50 = (
    (3, 224, 64, 7, 2, 3),  # stem
    (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1), (64, 56, 256, 1, 1, 0), (256, 56, 64, 1, 1, 0),
    (256, 56, 128, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 0), (256, 56, 512, 1, 2, 0),
    (512, 28, 128, 1, 1, 0), (128, 28, 128, 3, 1, 1),
    (512, 28, 256, 1, 1, 0), (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 0), (512, 28, 1024, 1, 2, 0),
    (1024, 14, 256, 1, 1, 0), (256, 14, 256, 3, 1, 1),
    (1024, 14, 512, 1, 1, 0), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 0), (1024, 14, 2048, 1, 2, 0),
    (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1),
)

ATTENTION_COLS = (128, 512, 2048, 8192, 32768)
ATTENTION_ELEMENTS = 1 << 24
VOCABULARY = ((1, 128256), (16, 32000), (64, 128256))  # (rows = batch, cols = vocabulary)


def llm_gemms(dtype: str, tokens: Iterable[int] = TOKENS,
              projections: Iterable[tuple[int, int]] = PROJECTIONS) -> list[Any]:
    return [Gemm(m=m, n=n, k=k, dtype=dtype) for m in tokens for n, k in projections]


def resnet50_convs(dtype: str, batches: Iterable[int] = (1, 32), layout: str = "nhwc",
                   shapes: Iterable[tuple[int, ...]] = RESNET50) -> list[Any]:
    return [Conv2d(n=b, c=c, h=hw, w=hw, k=k, r=rs, s=rs, stride=st, padding=p, layout=layout, dtype=dtype)
            for b in batches for c, hw, k, rs, st, p in shapes]


def softmax_rows(dtype: str, attention_cols: Iterable[int] = ATTENTION_COLS,
                 vocabulary: Iterable[tuple[int, int]] = VOCABULARY,
                 elements: int = ATTENTION_ELEMENTS) -> list[Any]:
    rows = [Softmax(rows=max(1, elements // c), cols=c, dtype=dtype) for c in attention_cols]
    return rows + [Softmax(rows=r, cols=c, dtype=dtype) for r, c in vocabulary]


def check_suite(name: str) -> str:
    """``name`` if it names a suite; BadInputError listing them otherwise."""
    from tracea.doctor.errors import BadInputError

    if name not in SUITES:
        raise BadInputError(f"--suite: no suite {name!r}; choose from {', '.join(SUITES)} (tracea bench --list)")
    return name
