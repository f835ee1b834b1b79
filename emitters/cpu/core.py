"""A kernel core of the CPU backend: the shared ``Core`` (emitters/core.py: name, ops, schedule class,
hero, space, check, render, kernel) plus what the runtime needs to call the kernel, which the C entry
point does not carry.

Adding an op to the CPU backend: a file with its renderer (on ``gemm_core`` if it is a GEMM, as
``conv.py`` is) and its core file in ``cores/`` (``CORES = (CpuCore(...),)`` and its ``ORDER``). Every CPU
family then offers the op (``variants.py``), described by the core's ``descriptions``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core import Core
from .isa import CpuIsa
from .schedule import CpuSchedule
from .schedules import check_schedule, hero_schedule


@dataclass(frozen=True, kw_only=True)
class CpuCore(Core):
    """One op kind's CPU kernel. The shared hooks take: ``hero(op, variant, host)``, ``space(op, variant,
    host)`` (valid candidates, hero first), ``check(op, variant, schedule, host)``, ``render(op, isa,
    schedule, header) -> the C source``, ``kernel(loaded CpuKernel)`` (outputs beyond out; None: as is).
    The GEMM micro-kernel's schedule, heuristic and check are the defaults."""

    schedule: type = CpuSchedule
    hero: Callable[[Any, Any, Any], Any] = hero_schedule
    check: Callable[[Any, Any, Any, Any], None] = check_schedule
    entry: str  # the exported function
    buffers: tuple[str, ...]  # pointer order of the entry's bufs argument; "out" is the output
    arguments: Callable[[Any], tuple[tuple[int, ...], tuple[float, ...]]]  # op -> (dims, threads last; fparams)
    tag: Callable[[Any], str]  # what the kernel's name says about the op
    shape_free: tuple[str, ...]  # the op's fields the source depends on (shapes are runtime arguments)
    metadata: Callable[[Any, CpuIsa, Any, str], dict[str, Any]]  # (op, isa, schedule, name)
    precisions: tuple[str, ...] = ("fp32", "fp16", "bf16")  # the input types its variants compute
    flags: Callable[[Any], tuple[str, ...]] | None = None  # schedule -> compiler flags beyond the ISA's (None: none)
