"""The Metal backend's core type (``MetalCore``) and its launch description (``Launch``). The cores are the
files of ``cores/``; ``build.py`` looks each step up there, never branching on an op.

Every kernel is one MSL source in the subset that ``compat.py`` models (its docstring lists it): buffers and
``constant`` scalars as ``[[buffer(i)]]`` arguments in ``Launch.args`` order, then the five built-in
arguments (``KERNEL_BUILTINS``); threadgroup memory as ``threadgroup T name[N];`` arrays at the top of the
kernel body; 32-lane simdgroups; ``simdgroup_matrix`` 8x8 operations in simdgroup-uniform control flow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError

from ..core import Core
from ..schedule import schedule_fields

SIMD_WIDTH = 32  # lanes of an Apple GPU simdgroup (Apple7-Apple9)
THREADGROUP_MEMORY = 32 * 1024  # bytes of threadgroup memory a threadgroup may use (Apple7-Apple9)
MAX_THREADS = 1024  # threads a threadgroup may have (the pipeline's limit can be lower; the host checks it)

# The built-in arguments every kernel ends with, in this order (the simulator passes them so)
KERNEL_BUILTINS = ("uint3 tgid [[threadgroup_position_in_grid]]",
                   "uint3 tpos [[thread_position_in_threadgroup]]",
                   "uint tidx [[thread_index_in_threadgroup]]",
                   "uint sgid [[simdgroup_index_in_threadgroup]]",
                   "uint lane [[thread_index_in_simdgroup]]")


@dataclass(frozen=True)
class Launch:
    """One kernel ready for any runner (Metal on a Mac, torch's MPS shader library, the CPU simulator).

    ``grid``: threadgroups along x, y, z (``dispatchThreadgroups``); ``block``: threads per threadgroup, a
    multiple of ``SIMD_WIDTH``; ``args`` in ``[[buffer(i)]]`` order: ("in", input name) a buffer the kernel
    reads, ("out", None) the op's output, ("i32", v) / ("u32", v) / ("f32", v) a ``constant`` scalar;
    ``threadgroup_bytes``: the threadgroup memory its arrays declare."""

    name: str
    source: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[tuple[str, Any], ...]
    threadgroup_bytes: int = 0

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True, kw_only=True)
class MetalCore(Core):
    """One op kind's Metal kernel (the shared ``Core``, emitters/core.py). ``check_op(op)`` raises
    ``UnsupportedError`` for a case the kernel does not compute, before any schedule exists; the shared
    hooks take: ``hero(op, gpu_cores)``, ``space(op, hero)``, ``check(op, variant, schedule, host)``
    (``BadInputError``), ``render(op, schedule) -> the Launch``. ``family``: the variant family
    (variants.py) whose variant for the op it is."""

    check_op: Callable[[Any], None]
    family: str


def schedule_json(s: Any, kind: str) -> dict[str, Any]:
    """A Metal schedule's JSON: the backend, its kind and its fields (every op's)."""
    return {"backend": "metal", "kind": kind, **dataclasses.asdict(s)}


def read_schedule(cls: type, d: Any, kind: str) -> Any:
    """A schedule of ``cls`` from ``schedule_json``'s document, its fields checked (``BadInputError``)."""
    if not isinstance(d, dict):
        raise BadInputError(f"a Metal schedule is a JSON object, not {type(d).__name__}")
    if d.get("kind") != kind:
        raise BadInputError(f"schedule kind {d.get('kind')!r} is not a {kind} schedule")
    fields = schedule_fields({k: v for k, v in d.items() if k != "kind"}, cls, "metal", "Metal",
                             tuple(f.name for f in dataclasses.fields(cls)))
    s = cls(**fields)
    s.validate()
    return s
