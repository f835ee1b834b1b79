"""The CPU search space: every CpuSchedule worth measuring for an op on this host, hero first. Each
op's core names its space (``cores.CORES``); what a space keeps is in ``schedules.py``."""

from __future__ import annotations

from typing import Any

from .cores import core_for
from .schedule import CpuSchedule
from .schedules import micro_kernels, thread_counts
from .variants import resolve

__all__ = ["micro_kernels", "search_space", "thread_counts"]


def search_space(op: Any, variant: Any, host: Any) -> list[CpuSchedule]:
    """Every valid candidate for ``op`` with ``variant`` on ``host``, the hero schedule first."""
    return core_for(op.kind).space(op, resolve(variant), host)
