"""The CUDA backend's `tracea bench` suites: the GPU suites every GPU backend shares (emitters/gpu.py), those whose rows
a CUDA variant computes."""

from __future__ import annotations

from typing import Any

from ..gpu import gpu_suites

__all__ = ["suites"]


def suites(quick: bool = False) -> dict[str, list[Any]]:
    # the cores' registry: imported when a suite is asked for, not by `tracea --help`
    from .variants import RENDERED

    return gpu_suites(quick, RENDERED)
