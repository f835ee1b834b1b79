"""The CUDA backend's standard `tracea bench` suite: one representative case per operation in the
precisions GPU users run (bf16 GEMM, fp16 NHWC convolution, fp16 softmax), each large enough to fill an
H100 for a fraction of a millisecond or more."""

from __future__ import annotations

from typing import Any


def standard_suite() -> list[Any]:
    from tracea.kernels import Conv2d, Gemm, Softmax

    return [
        Gemm(m=4096, n=4096, k=4096, dtype="bf16"),
        Conv2d(n=32, c=256, h=56, w=56, k=256, r=3, s=3, padding=1, layout="nhwc", dtype="fp16"),
        Softmax(rows=8192, cols=8192, dtype="fp16"),
    ]
