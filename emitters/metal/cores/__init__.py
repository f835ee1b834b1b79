"""The Metal backend's kernel cores by op kind, one core file each in this folder (``CORES = (MetalCore(...),)``
and its ``ORDER``): what each op's kernel computes (``check_op``), its schedule class, heuristic, search
space, schedule check and launch are looked up here, never branched on in ``build.py``. ``emitters/core.py``'s
``gathered`` reads the folder, so adding an op is its kernel module plus its core file here."""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import UnsupportedError

from ...core import gathered
from ..core import MetalCore

CORES: dict[str, MetalCore] = {kind: core for core in gathered(__name__, __path__) for kind in core.ops}


def core_for(op: Any) -> MetalCore:
    """The core of ``op``'s kind, its ``check_op`` passed; UnsupportedError for a kind or case it does not take."""
    kind = getattr(op, "kind", None)
    core = CORES.get(kind)  # type: ignore[arg-type]
    if core is None:
        raise UnsupportedError(f"the Metal backend has no {kind} kernel")
    core.check_op(op)
    return core
