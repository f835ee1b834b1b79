"""A kernel core of the CPU backend: what one op kind plugs in, in the shape every backend's cores share
(schedule class, heuristic, space, check, render), plus what the runtime needs to call the kernel.

Adding an op to the CPU backend: a file with its renderer (on ``gemm_core`` if it is a GEMM, as
``conv.py`` is) that ends with ``CORE = Core(...)``, and one line in ``registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..schedule import CpuSchedule
from .isa import CpuIsa
from .schedules import check_schedule, hero_schedule


@dataclass(frozen=True)
class Core:
    kind: str  # the op kind it computes
    render: Callable[[Any, CpuIsa, CpuSchedule, str], str]  # (op, isa, schedule, header) -> the C source
    space: Callable[[Any, Any, Any], list[CpuSchedule]]  # (op, variant, host) -> valid candidates, hero first
    entry: str  # the exported function
    buffers: tuple[str, ...]  # pointer order of the entry's bufs argument; "out" is the output
    arguments: Callable[[Any], tuple[tuple[int, ...], tuple[float, ...]]]  # op -> (dims, threads last; fparams)
    tag: Callable[[Any], str]  # what the kernel's name says about the op
    shape_free: tuple[str, ...]  # the op's fields the source depends on (shapes are runtime arguments)
    metadata: Callable[[Any, CpuIsa, CpuSchedule, str], dict[str, Any]]  # (op, isa, schedule, name)
    schedule: type = CpuSchedule
    heuristic: Callable[[Any, Any, Any], CpuSchedule] = hero_schedule  # (op, variant, host)
    check: Callable[[Any, Any, CpuSchedule, Any], None] = check_schedule  # (op, variant, schedule, host)
    kernel: Callable[[Any], Any] | None = None  # wraps the loaded CpuKernel (outputs beyond out); None: as is
