"""The library each Tracea kernel is measured against, computing the same function in the same process.

gemm: NumPy's matmul (its BLAS, e.g. OpenBLAS) plus the epilogue in NumPy; conv2d: torch's CPU
convolution when torch is installed; softmax: torch.softmax when torch is installed, else NumPy.
16-bit inputs are widened to float32 once, outside the timed call (NumPy has no bf16 arithmetic), so
the baseline does fp32 work: the comparison says so in its name.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracea.kernels import Conv2d, DType, Gemm, Op, Softmax
from tracea.kernels.dtypes import to_float64
from tracea.kernels.epilogue import ArrayMath, gelu_tanh
from tracea.kernels.epilogue import apply as apply_epilogue

from .blas_env import describe


@dataclass(frozen=True)
class Baseline:
    name: str
    run: Callable[[], np.ndarray] | None  # None: unavailable here
    reason: str | None = None  # why unavailable


def _f32(x: np.ndarray, dtype: DType) -> np.ndarray:
    return np.ascontiguousarray(to_float64(x, dtype).astype(np.float32) if dtype is not DType.FP32 else x)


def _blas_name() -> str:
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.25
        blas = cfg["Build Dependencies"]["blas"]
        name = f"{blas.get('name', 'BLAS')} {blas.get('version', '')}".strip()
        if "openblas" not in name.lower():
            return name
        core = openblas_core()
        return f"{name}{f', {core} kernels' if core else ''}, {describe()}"
    except Exception:  # noqa: BLE001
        return "BLAS"


def openblas_core() -> str | None:
    """The core type whose kernels the loaded OpenBLAS runs (its own choice for this CPU, or what
    OPENBLAS_CORETYPE forced), as threadpoolctl reads it from the library; None when unknown."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    cores = [i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"]
    return cores[0] if cores and cores[0] else None


def pinned_note(host: object) -> str | None:
    """Why the CPU baseline does not run at its library's best on this machine (a BLAS pinned to an older
    kernel set or to fewer threads by the environment), for the ratio line; None when it does."""
    import os

    from tracea.doctor.blas_pin import pinned_below, unset_command

    reasons = pinned_below(host.cpu, os.environ)  # type: ignore[attr-defined]
    if not reasons:
        return None
    return ("the baseline is pinned below its best for this CPU (" + "; ".join(reasons) + "), so the ratio "
            f"flatters Tracea; for the library's own choice run this command under `{unset_command(os.environ, reasons)}`"
            " (some machines pin it on purpose: old OpenBLAS builds compute wrong results on new CPUs; `tracea doctor` says more)")


def _gelu_inplace(c: np.ndarray) -> np.ndarray:
    c[...] = gelu_tanh(c, np.tanh)
    return c


# The epilogue vocabulary in NumPy's in-place forms: a baseline allocates nothing per call.
NUMPY_INPLACE = ArrayMath(add=lambda c, x: np.add(c, x, out=c), mul=lambda c, a: np.multiply(c, np.float32(a), out=c),
                          unary={"relu": lambda c: np.maximum(c, 0, out=c), "gelu": _gelu_inplace})


def gemm_baseline(op: Gemm, inputs: dict[str, np.ndarray]) -> Baseline:
    a, b = _f32(inputs["a"], op.dtype), _f32(inputs["b"], op.dtype)
    a = a if op.layout_a == "row" else a.T
    b = b if op.layout_b == "row" else b.T
    out = np.empty((op.m, op.n), np.float32)
    extra = {k: _f32(v, op.dtype) for k, v in inputs.items() if k in ("bias", "residual")}

    def run() -> np.ndarray:
        np.matmul(a, b, out=out)
        return apply_epilogue(op.epilogue, out, extra, op.alpha, NUMPY_INPLACE)

    suffix = "" if op.dtype is DType.FP32 else f", {op.dtype.value} inputs widened to fp32"
    return Baseline(f"numpy.matmul ({_blas_name()}{suffix})", run)


def _torch():
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch


def conv2d_baseline(op: Conv2d, inputs: dict[str, np.ndarray]) -> Baseline:
    torch = _torch()
    if torch is None:
        return Baseline("torch.nn.functional.conv2d", None, "torch is not installed (pip install 'tracea[torch]')")
    x = torch.from_numpy(_f32(inputs["x"], op.dtype))
    w = torch.from_numpy(_f32(inputs["weight"], op.dtype))
    bias = torch.from_numpy(_f32(inputs["bias"], op.dtype)) if op.bias else None
    if op.layout == "nhwc":
        x = x.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        w = w.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

    def run() -> np.ndarray:
        with torch.no_grad():
            y = torch.nn.functional.conv2d(x, w, bias, op.stride, op.padding, op.dilation, op.groups)
        return (y.permute(0, 2, 3, 1) if op.layout == "nhwc" else y).numpy()

    return Baseline(f"torch {torch.__version__} conv2d (CPU, fp32)", run)


def softmax_baseline(op: Softmax, inputs: dict[str, np.ndarray]) -> Baseline:
    x = _f32(inputs["x"], op.dtype)
    torch = _torch()
    if torch is not None:
        tx = torch.from_numpy(x)
        return Baseline(f"torch {torch.__version__} softmax (CPU, fp32)", lambda: torch.softmax(tx, dim=1).numpy())
    out = np.empty_like(x)

    def run() -> np.ndarray:
        np.subtract(x, x.max(axis=1, keepdims=True), out=out)
        np.exp(out, out=out)
        np.divide(out, out.sum(axis=1, keepdims=True), out=out)
        return out

    return Baseline("numpy softmax (fp32)", run)


# One baseline per op kind: adding an op adds its line here.
BASELINES: dict[str, Callable[[Any, dict[str, np.ndarray]], Baseline]] = {
    "gemm": gemm_baseline, "conv2d": conv2d_baseline, "softmax": softmax_baseline}


def baseline_for(op: Op, inputs: dict[str, np.ndarray]) -> Baseline:
    make = BASELINES.get(op.kind)
    return make(op, inputs) if make else Baseline("none", None, f"no baseline for {op.kind}")
