"""The CUDA kernel cores, one core file each in this folder.

A core is everything that takes one family of kernels from an op to a launch (``core.py``'s ``CudaCore``):
its schedule class (read from JSON; its ``features`` are what the tuner's model sees), the heuristic
schedule (the hero), the search space, the checks, the renderer and the host-side kernel object.
``build.py`` looks each step up here by the variant (family, op) or by the schedule (core, op), so it holds
no branch on a core or an op.

Adding a core or an op: write its kernel module (schedule, ``hero_schedule``, ``search_space``, ``render``)
and its core file here (``CORES = (CudaCore(...),)`` and its ``ORDER``, the variants' order);
``emitters/core.py``'s ``gathered`` reads the folder, so no other file lists it. A core with a family is that
family's variant for each op it computes (``variants.py`` makes them from its line; offered to the planner
once ``verified`` on a GPU). A core that serves other families' variants beside their main core (``gemv``:
the small-M GEMM of cuda-mma-sync and cuda-wgmma) has no family of its own, names those in ``serves`` and
the ops it is their hero for in ``prefers``: ``hero_core`` picks it, ``search_space`` adds its candidates,
``for_check`` checks its schedules. Every function is a direct reference to its module's own, which readers
and tools can follow: importing the registry imports the renderers (and NumPy), which only the build path
(``build.py``, ``tracea plan`` and what builds kernels) needs; ``tracea --help`` and ``tracea doctor`` do not
import it. The kernel objects' driver side (cuda-core) is still imported at a kernel's first load, inside
``runtime.py``.
"""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import BadInputError
from tracea.doctor.variants import Variant

from ...core import gathered
from ..core import CudaCore
from ..schedule import CudaSchedule

# The order of the variants (variants.py): each core file's ORDER.
CORES: tuple[CudaCore, ...] = gathered(__name__, __path__)

BY_VARIANT: dict[tuple[str, str], CudaCore] = {(c.family, op): c for c in CORES for op in c.ops if c.family}
# (family, op) -> the family's cores for the op: its main core (BY_VARIANT), then the alternates it runs
FAMILY_CORES: dict[tuple[str, str], tuple[CudaCore, ...]] = {
    key: (main, *(c for c in CORES if c is not main and key[1] in c.ops
                  and (key[0] in c.serves or f"{key[0]}.{key[1]}" in c.serves)))
    for key, main in BY_VARIANT.items()}
BY_SCHEDULE: dict[tuple[str, str], CudaCore] = {(c.name, op): c for c in CORES for op in c.ops}


def for_variant(v: Variant, op: Any) -> CudaCore:
    """The core that runs ``op`` for variant ``v`` (its family's core for the op's kind)."""
    kind = getattr(op, "kind", None)
    core = BY_VARIANT.get((v.family, kind))
    if core is None:
        raise BadInputError(f"variant: {v.id} has no CUDA core for {kind!r}")
    return core


def cores_for(v: Variant, op: Any) -> tuple[CudaCore, ...]:
    """Every core variant ``v`` may run ``op`` on: its main core first, then its alternates."""
    return FAMILY_CORES.get((v.family, getattr(op, "kind", None))) or (for_variant(v, op),)


def hero_core(v: Variant, op: Any) -> CudaCore:
    """The core whose heuristic schedule is the hero for ``op``: the first alternate that prefers it (gemv
    for M <= 16), else the main core."""
    main, *alternates = cores_for(v, op)
    return next((c for c in alternates if c.prefers is not None and c.prefers(op)), main)


def for_check(v: Variant, op: Any, schedule: Any) -> CudaCore:
    """The core that checks ``schedule`` for ``op`` under ``v``: the schedule's own where ``v`` runs it,
    else the main core (whose check names the mismatch)."""
    mine = BY_SCHEDULE.get((getattr(schedule, "core", None), getattr(op, "kind", None)))
    family = cores_for(v, op)
    return mine if mine in family else family[0]


def for_schedule(op: Any, schedule: Any) -> CudaCore:
    """The core that renders ``schedule`` for ``op``."""
    core = BY_SCHEDULE.get((getattr(schedule, "core", None), getattr(op, "kind", None)))
    if core is None:
        raise BadInputError(f"schedule: no CUDA core {getattr(schedule, 'core', None)!r} computes "
                            f"{getattr(op, 'kind', op)!r}")
    return core


def for_json(d: dict[str, Any]) -> CudaCore | None:
    """The core a schedule's JSON names by its "core" (and "kernel", where cores share a name); None for
    a name no core has (``CudaSchedule.from_json`` then names what is wrong)."""
    named = [c for c in CORES if c.name == d.get("core")]
    return next((c for c in named if d.get("kernel") in c.ops), named[0] if named else None)


def schedule_from_json(d: dict[str, Any]) -> Any:
    core = for_json(d)
    return core.schedule_from_json(d) if core is not None else CudaSchedule.from_json(d)
