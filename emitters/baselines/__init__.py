"""The library each Tracea kernel is measured against, computing the same function in the same process: one
file per op kind here (``gemm.py``, ``conv2d.py``, ``softmax.py``, ``attention.py``), found by the op's
name, each with ``host(op, inputs) -> Baseline`` (on the CPU: NumPy and its BLAS, torch's CPU kernels) and
``device(op, tensors, torch) -> (name, call[, also timed])`` (PyTorch's kernels on a GPU, timed by
``emitters/device_baselines.py``). A new op's baselines are its file here; nothing lists it.

What is shared lives here: ``Baseline``, the BLAS's name and kernel set (``openblas_core``, ``pinned_note``),
16-bit inputs widened to float32 once, outside the timed call (NumPy has no bf16 arithmetic: the baseline
does fp32 work, and its name says so), the epilogue in NumPy's in-place forms, torch when installed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from tracea.kernels import DType, Op
from tracea.kernels.dtypes import to_float64
from tracea.kernels.epilogue import ArrayMath, gelu_tanh

from ..blas_env import describe


@dataclass(frozen=True)
class Baseline:
    name: str
    run: Callable[[], np.ndarray] | None  # None: unavailable here
    reason: str | None = None  # why unavailable


@functools.cache
def for_kind(kind: str) -> ModuleType | None:
    """The baselines of the op kind ``kind`` (this folder's file of that name), or None where it has none."""
    if not kind.isidentifier():
        return None
    name = f"{__name__}.{kind}"
    return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None


def baseline_for(op: Op, inputs: dict[str, np.ndarray]) -> Baseline:
    """The op's baseline on the host (its file's ``host``)."""
    mod = for_kind(op.kind)
    return mod.host(op, inputs) if mod is not None else Baseline("none", None, f"no baseline for {op.kind}")


def device_call(kind: str) -> Callable[[Any, dict[str, Any], Any], tuple[Any, ...]] | None:
    """The op kind's PyTorch call on a device (its file's ``device``), or None where it has none."""
    mod = for_kind(kind)
    return getattr(mod, "device", None) if mod is not None else None


def f32(x: np.ndarray, dtype: DType) -> np.ndarray:
    return np.ascontiguousarray(to_float64(x, dtype).astype(np.float32) if dtype is not DType.FP32 else x)


def blas_name() -> str:
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


class TorchOut:
    """A torch result read as NumPy only when asked (``np.asarray``), so a 16-bit output is widened outside the
    timed call."""

    def __init__(self, y: Any) -> None:
        self.y = y

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        y = self.y
        out = (y.float() if y.is_floating_point() and y.element_size() == 2 else y).numpy()
        return out if dtype is None else out.astype(dtype)


def torch_or_none() -> Any:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return torch



def tf32_off(op: Any) -> str:
    """What an fp32 device baseline's name says: TF32 is off, so both sides do fp32 arithmetic."""
    return ", TF32 off" if op.dtype.value == "fp32" else ""


def torch_math(torch: Any) -> ArrayMath:
    """The epilogue vocabulary in PyTorch's own kernels."""
    gelu = torch.nn.functional.gelu
    return ArrayMath(add=lambda c, x: c + x, mul=lambda c, a: c * a,
                     unary={"relu": torch.relu, "gelu": lambda c: gelu(c, approximate="tanh")})
