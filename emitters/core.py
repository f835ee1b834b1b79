"""A kernel core: everything that takes one family of kernels from an op to a kernel, as one registry line.

Every backend keeps a registry of its cores, a folder of core files (``cpu/cores/``, ``cuda/cores/``,
``hip/cores/``) that ``gathered`` reads: each file one or more ``Core`` lines (or the backend's subclass)
naming its kernel module's functions by direct reference, so that the backend's ``build.py`` looks each step
up there and branches on no op kind. The fields below are what every
backend's cores have; a subclass adds only what one backend needs beside them:

- ``CpuCore`` (``cpu/core.py``): the runtime's call interface, which the C entry point does not carry
  (entry, buffer order, arguments, the kernel name's tag, the fields the source depends on, metadata);
- ``CudaCore`` (``cuda/core.py``): several cores per op kind, so the variant family whose main core it is,
  and for an alternate core the families it serves beside theirs and where it is their hero
  (``serves``, ``prefers``, ``applies``);
- ``HipCore`` (``hip/core.py``): the check of the op alone (``check_op``), before any schedule exists.

The callables' arguments are each backend's own (its build passes what its target is: a host report, an
``Arch``, a count of compute units); the subclasses' docstrings list them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Core:
    """One kernel core of a backend and the ops it serves."""

    name: str
    """What the core is called: on CUDA its schedules' ``core``; on the CPU and HIP the op kind it computes."""

    ops: tuple[str, ...]
    """The op kinds it computes."""

    schedule: type
    """Its schedule class (a ``Schedule``, emitters/schedule.py): the type its checks expect, and
    ``schedule.from_json`` reads one back (``schedule_from_json``)."""

    hero: Callable[..., Any]
    """The heuristic schedule for an op on the target: what runs when nothing is tuned, the space's first."""

    space: Callable[..., Any]
    """The candidates the tuner measures."""

    check: Callable[..., None]
    """``(op, variant, schedule, target)``: raise ``BadInputError`` or ``UnsupportedError`` when the schedule
    cannot run the op with the variant on the target; pass otherwise."""

    render: Callable[..., Any]
    """The kernel's source (on a GPU with its launch description: grid, block, shared memory, arguments)."""

    kernel: Callable[..., Any] | None = None
    """The loaded kernel object over a compiled artifact; None: the backend's plain one."""

    serving: bool = False
    """Whether it computes an op's serving forms (attention's per-entry ``seq_lens`` and paged K/V, whose
    ``serving`` is true); a core without them is refused such an op (``refuse_serving``) before its check."""

    packed: bool = False
    """Whether it computes packed variable-length entries (attention's ``packed``: token-major q, k, v and
    offsets); ``refuse_serving`` refuses such an op to a core without them."""

    descriptions: dict[str, str] = field(default_factory=dict)
    """What its variant says it is, per op it computes (the backend's ``variants.py`` makes each variant
    from its core's line: ``Variant.description``, on the CPU the op's part of it); none for a core that
    is no variant's own (a CUDA alternate)."""

    def schedule_from_json(self, d: dict[str, Any]) -> Any:
        """One of this core's schedules from its ``to_json()``."""
        return self.schedule.from_json(d)  # type: ignore[attr-defined, no-any-return]


def refuse_serving(core: Core, op: Any, backend: str) -> None:
    """The one error for an op in a serving form (per-entry lengths, a paged pool) on a core without them."""
    from tracea.doctor.errors import UnsupportedError

    if getattr(op, "packed", False) and not core.packed:
        raise UnsupportedError(f"{backend} {core.name}: packed variable-length entries (cu_seqlens) are not "
                               "computed by this kernel", "they run on the Hopper attention kernel (sm_90) and the CPU")
    if getattr(op, "serving", False) and not core.serving and not (getattr(op, "packed", False) and core.packed):
        raise UnsupportedError(f"{backend} {core.name}: per-entry seq_lens and paged K/V are not computed by this "
                               "kernel", "they run on the CUDA decode core (at most 16 queries) and on the CPU")


def check_schedule(core: Core, op: Any, variant: Any, schedule: Any, target: Any, backend: str) -> None:
    """``schedule`` checked for ``op`` on ``core``: of the core's schedule type (``BadInputError`` otherwise), the op
    not in a serving form the core lacks (``refuse_serving``), then the core's own check."""
    from tracea.doctor.errors import BadInputError

    if not isinstance(schedule, core.schedule):
        raise BadInputError(f"a {op.kind} on {backend} takes a {core.schedule.__name__}, not {type(schedule).__name__}")
    refuse_serving(core, op, backend)
    core.check(op, variant, schedule, target)


def ordered_modules(package: str, path: Iterable[str]) -> list[Any]:
    """Every module of a folder that is a list (a backend's ``cores/``, ``tracea.ops``' per-op folders), each
    with its ``ORDER`` (an int, unique in the folder), imported and sorted by it: the folder is the list, so a
    new entry is a new file and no other file names it."""
    modules = [importlib.import_module(f"{package}.{info.name}")
               for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name)]
    orders = [m.ORDER for m in modules]
    if len(set(orders)) != len(orders):
        raise RuntimeError(f"{package}: two files share an ORDER ({sorted(orders)})")
    return sorted(modules, key=lambda m: m.ORDER)


def gathered(package: str, path: Iterable[str]) -> tuple[Any, ...]:
    """The cores of a backend's ``cores`` folder, in its files' ``ORDER`` (``ordered_modules``): each file
    holds one core file's ``CORES`` (a tuple of cores); the order is the registry's, and its variants'."""
    return tuple(core for m in ordered_modules(package, path) for core in m.CORES)
