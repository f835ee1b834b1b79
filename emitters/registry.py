"""Every registered variant of every emitter, and the build entry point per backend.

Emitters own their variant lists; this is the one place that gathers them, so the decision engine
(doctor/plan.py) sees every backend without the doctor importing the emitters.
"""

from __future__ import annotations

import importlib
from typing import Any

from tracea.doctor.errors import UnsupportedError
from tracea.doctor.variants import Variant

BACKENDS = {"cpu": "tracea.emitters.cpu", "cuda": "tracea.emitters.cuda"}


def backend_module(backend: str) -> Any:
    name = BACKENDS.get(backend)
    if name is None:
        raise UnsupportedError(f"backend {backend!r} has no emitter yet (available: {', '.join(BACKENDS)})")
    return importlib.import_module(name)


def all_variants(backend: str | None = None) -> list[Variant]:
    out: list[Variant] = []
    for name in ([backend] if backend else list(BACKENDS)):
        out.extend(backend_module(name).VARIANTS)
    return out


def variant(variant_id: str) -> Variant:
    for v in all_variants():
        if v.id == variant_id:
            return v
    raise UnsupportedError(f"no registered variant {variant_id!r}")
