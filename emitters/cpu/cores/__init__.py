"""The CPU backend's kernel cores by op kind: render, space, heuristic and check are looked up here, never
branched on. Each file of this folder is one op's core (``CORES = (CpuCore(...),)`` and its ``ORDER``;
``CpuCore`` is ``core.py``'s), naming its kernel module's functions; ``emitters/core.py``'s ``gathered``
reads the folder, so adding an op is its kernel file plus its core file here, and nothing else lists it."""

from __future__ import annotations

from tracea.doctor.errors import UnsupportedError

from ...core import gathered
from ..core import CpuCore

CORES: dict[str, CpuCore] = {kind: core for core in gathered(__name__, __path__) for kind in core.ops}


def core_for(kind: str) -> CpuCore:
    core = CORES.get(kind)
    if core is None:
        raise UnsupportedError(f"op: the CPU emitter has no renderer for {kind!r}")
    return core
