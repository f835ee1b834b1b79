"""The CPU backend's standard `tracea bench` suite: one representative case per operation, sized so
each kernel runs for milliseconds on a laptop-class CPU (fp32, the dtype CPU users run)."""

from __future__ import annotations

from typing import Any


def standard_suite() -> list[Any]:
    from tracea.kernels import Conv2d, Gemm, Softmax

    return [
        Gemm(m=1024, n=1024, k=1024, dtype="fp32"),
        Conv2d(n=1, c=64, h=56, w=56, k=64, r=3, s=3, padding=1, layout="nhwc", dtype="fp32"),
        Softmax(rows=4096, cols=1024, dtype="fp32"),
    ]
