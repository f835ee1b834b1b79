"""GEMM's baselines: NumPy's matmul (its BLAS, e.g. OpenBLAS) plus the epilogue in NumPy on the host;
torch's matmul (cuBLAS) plus the epilogue in torch on a device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tracea.kernels import DType
from tracea.kernels.epilogue import apply as apply_epilogue

from . import NUMPY_INPLACE, Baseline, blas_name, f32, tf32_off, torch_math


def host(op: Any, inputs: dict[str, np.ndarray]) -> Baseline:
    a, b = f32(inputs["a"], op.dtype), f32(inputs["b"], op.dtype)
    a = a if op.layout_a == "row" else a.T
    b = b if op.layout_b == "row" else b.T
    out = np.empty((op.m, op.n), np.float32)
    extra = {k: f32(v, op.dtype) for k, v in inputs.items() if k in ("bias", "residual")}

    def run() -> np.ndarray:
        np.matmul(a, b, out=out)
        return apply_epilogue(op.epilogue, out, extra, op.alpha, NUMPY_INPLACE)

    suffix = "" if op.dtype is DType.FP32 else f", {op.dtype.value} inputs widened to fp32"
    return Baseline(f"numpy.matmul ({blas_name()}{suffix})", run)


def device(op: Any, t: dict[str, Any], torch: Any) -> tuple[str, Callable[[], Any]]:
    a = t["a"] if op.layout_a == "row" else t["a"].t()
    b = t["b"] if op.layout_b == "row" else t["b"].t()
    math = torch_math(torch)

    def run():
        return apply_epilogue(op.epilogue, a @ b, t, op.alpha, math)

    return f"matmul (cuBLAS{tf32_off(op)})", run
