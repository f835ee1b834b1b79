"""Softmax's baselines: torch.softmax on the CPU when torch is installed, else NumPy, on the host;
torch.softmax on a device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import Baseline, f32, torch_or_none


def host(op: Any, inputs: dict[str, np.ndarray]) -> Baseline:
    x = f32(inputs["x"], op.dtype)
    torch = torch_or_none()
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


def device(op: Any, t: dict[str, Any], torch: Any) -> tuple[str, Callable[[], Any]]:
    def run():
        return torch.softmax(t["x"], dim=1)
    return "softmax", run


