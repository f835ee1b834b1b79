"""The CPU backend's kernel cores by op kind: render, space, heuristic and check are looked up here,
never branched on. Adding an op is its file (ending in ``CORE = CpuCore(...)``, see ``cores.py``) plus one
line below."""

from __future__ import annotations

from tracea.doctor.errors import UnsupportedError

from . import attention, conv, gemm, softmax
from .cores import CpuCore

CORES: dict[str, CpuCore] = {kind: core for core in (
    gemm.CORE,
    conv.CORE,
    softmax.CORE,
    attention.CORE,
) for kind in core.ops}


def core_for(kind: str) -> CpuCore:
    core = CORES.get(kind)
    if core is None:
        raise UnsupportedError(f"op: the CPU emitter has no renderer for {kind!r}")
    return core
