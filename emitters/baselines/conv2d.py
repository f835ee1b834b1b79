"""Convolution's baselines: torch's CPU convolution (fp32) on the host when torch is installed; cuDNN's
through torch.nn.functional.conv2d on a device (NHWC as channels_last views of the same bytes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import Baseline, f32, tf32_off, torch_or_none


def host(op: Any, inputs: dict[str, np.ndarray]) -> Baseline:
    torch = torch_or_none()
    if torch is None:
        return Baseline("torch.nn.functional.conv2d", None, "torch is not installed (pip install 'tracea[torch]')")
    x = torch.from_numpy(f32(inputs["x"], op.dtype))
    w = torch.from_numpy(f32(inputs["weight"], op.dtype))
    bias = torch.from_numpy(f32(inputs["bias"], op.dtype)) if op.bias else None
    if op.layout == "nhwc":
        x = x.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        w = w.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

    def run() -> np.ndarray:
        with torch.no_grad():
            y = torch.nn.functional.conv2d(x, w, bias, op.stride, op.padding, op.dilation, op.groups)
        return (y.permute(0, 2, 3, 1) if op.layout == "nhwc" else y).numpy()

    return Baseline(f"torch {torch.__version__} conv2d (CPU, fp32)", run)


def device(op: Any, t: dict[str, Any], torch: Any) -> tuple[str, Callable[[], Any]]:
    x, w = t["x"], t["weight"]
    if op.layout == "nhwc":
        x, w = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)  # channels_last views of the same bytes
    conv = torch.nn.functional.conv2d

    def run():
        y = conv(x, w, t.get("bias"), op.stride, op.padding, op.dilation, op.groups)
        return y.permute(0, 2, 3, 1) if op.layout == "nhwc" else y
    return f"conv2d (cuDNN, {op.layout}{tf32_off(op)})", run


