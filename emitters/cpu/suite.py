"""The CPU backend's `tracea bench` suites: each op's suites (kernels/workloads.py) as a CPU's users run them
(fp32; the LLM projections at decode and short prefill, M = 1, 16, 128; ResNet-50 at batch 1; softmax over
4M-element row sets). ``quick``: a few rows of each, seconds on a 2-core CI machine."""

from __future__ import annotations

from typing import Any


def suites(quick: bool = False) -> dict[str, list[Any]]:
    from tracea.kernels import workloads

    return workloads.suites("host", quick)
