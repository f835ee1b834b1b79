"""Which of the Hopper conv's paths a convolution can take: the "gemm" path where it is a plain GEMM over
its own NHWC buffers (``gemm_view``), the "im2col" path where TMA's im2col mode can walk its activations;
each check returns why not (None: it can). The "gather" path takes any conv the schedule accepts.
"""

from __future__ import annotations

from typing import Any

from .ptx import PTX_TYPE


def gemm_view_unsupported(op: Any) -> str | None:
    """Why ``op`` is not a plain GEMM over its own NHWC buffers (None: it is). A 1x1 filter with stride 1
    and no padding reads pixel m of x for output pixel m, so out[N*H*W, K] = x[N*H*W, C] @ w[K, C]^T:
    x is A (row-major, rows C apart), the K x 1 x 1 x C filter is a column-major B, the conv's bias the
    GEMM's (dilation does not move a 1x1 filter's only tap). TMA needs rows of 16 bytes: C, K % 8 == 0."""
    if getattr(op, "kind", None) != "conv2d":
        return f"not a conv2d ({getattr(op, 'kind', None)})"
    checks = ((op.layout == "nhwc", f"layout {op.layout} (NHWC only: x must be [N*H*W, C] row-major)"),
              ((op.r, op.s) == (1, 1), f"a {op.r}x{op.s} filter (1x1 only)"),
              (tuple(op.padding) == (0, 0), f"padding {tuple(op.padding)} (0 only)"),
              (tuple(op.stride) == (1, 1), f"stride {tuple(op.stride)} (1 only: output pixel m reads x's pixel m)"),
              (op.groups == 1, f"groups {op.groups} (1 only)"),
              (op.dtype.value in PTX_TYPE, f"dtype {op.dtype.value} (bf16 or fp16)"),
              (op.c % 8 == 0 and op.k % 8 == 0, f"C = {op.c}, K = {op.k} (TMA rows need multiples of 8)"))
    return next((why for ok, why in checks if not ok), None)


def im2col_unsupported(op: Any) -> str | None:
    """Why TMA's im2col mode cannot load ``op``'s activations (None: it can). The bounding box of a 4-d
    im2col tensor map has corners within [-128, 127] (lower: -pad; upper: pad - dilation x (filter - 1)),
    traversal strides of 1 to 8, and 16-bit filter offsets."""
    corners = [-p for p in op.padding] + [p - d * (f - 1) for p, d, f in zip(op.padding, op.dilation, (op.r, op.s),
                                                                              strict=True)]
    if any(not -128 <= c <= 127 for c in corners):
        return f"padding {tuple(op.padding)} with a {op.r}x{op.s} filter dilated {tuple(op.dilation)}"
    if any(not 1 <= st <= 8 for st in op.stride):
        return f"stride {tuple(op.stride)} (1 to 8)"
    if max(op.dilation[0] * (op.r - 1), op.dilation[1] * (op.s - 1)) > 65535:
        return f"filter offsets past 16 bits ({op.r}x{op.s} dilated {tuple(op.dilation)})"
    return None


def gemm_view(op: Any) -> Any:
    """The ``Gemm`` that a 1x1 conv ``op`` is (``gemm_view_unsupported``): same buffers, no copies."""
    from tracea.kernels import Gemm

    return Gemm(m=op.gemm_m, n=op.k, k=op.c, dtype=op.dtype.value, layout_a="row", layout_b="col",
                epilogue=("bias",) if op.bias else ())
