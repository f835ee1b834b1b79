"""Rendering one CPU kernel: the operation's renderer on the variant's ISA part, plus what the runtime
needs to call it (entry name, buffer order, runtime dimensions) and its metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .cores import core_for
from .isa import CpuIsa, isa_for
from .schedule import CpuSchedule


@dataclass(frozen=True)
class Rendered:
    name: str
    source: str
    entry: str
    flags: tuple[str, ...]  # the ISA's flags for this input type (the compiler adds BASE_FLAGS)
    buffers: tuple[str, ...]  # pointer order of the entry's bufs argument; "out" is the output
    dims: tuple[int, ...]  # the entry's int64 dims (threads last, 0 = the schedule's)
    fparams: tuple[float, ...]
    metadata: dict[str, Any] = field(default_factory=dict)


def kernel_name(op: Any, family: str, s: CpuSchedule) -> str:
    fam = family.removeprefix("cpu-").replace("-", "")
    path = "_sm" if getattr(s, "small_m", False) else ""  # the small-M GEMM path (gemv.py)
    return f"{op.kind}_{op.dtype.value}_{core_for(op.kind).tag(op)}_{fam}{path}_{s.mr}x{s.nr}"


def _header(op: Any, family: str, s: CpuSchedule, name: str) -> str:
    # Only what the source depends on: shapes (and alpha) are runtime arguments, so one binary (one
    # cache entry) serves every shape of this kind.
    free = core_for(op.kind).shape_free
    kind = {k: v for k, v in op.to_json().items() if k in free}
    return (f"/* Tracea CPU kernel {name}: generated, do not edit.\n"
            f" * variant  {family}.{op.kind}\n"
            f" * op       {json.dumps(kind, sort_keys=True)}, shapes at run time\n"
            f" * schedule {json.dumps(s.to_json(), sort_keys=True)} */\n")


def render(op: Any, family: str, s: CpuSchedule) -> Rendered:
    """The op's core (``cores.CORES``) rendered on the family's ISA."""
    isa = isa_for(family)
    core = core_for(op.kind)
    name = kernel_name(op, family, s)
    dims, fparams = core.arguments(op)
    return Rendered(name=name, source=core.render(op, isa, s, _header(op, family, s, name)), entry=core.entry,
                    flags=(*isa.compile_flags(op.dtype.value), *(core.flags(s) if core.flags else ())),
                    buffers=core.buffers, dims=dims, fparams=fparams,
                    metadata=core.metadata(op, isa, s, name))


def metadata(op: Any, isa: CpuIsa, s: CpuSchedule, name: str) -> dict[str, Any]:
    """DESIGN.md's kernel metadata (Tessera §11.2) for a CPU kernel: GPU-only resources are None."""
    return core_for(op.kind).metadata(op, isa, s, name)
