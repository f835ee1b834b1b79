"""The CUDA backend's `tracea bench` suites: the GPU suites every GPU backend shares (emitters/gpu.py)."""

from __future__ import annotations

from ..gpu import gpu_suites as suites

__all__ = ["suites"]
