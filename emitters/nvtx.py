"""NVTX ranges named after the Tessera phases, so Nsight Systems timelines show Tracea's work.

    from tracea.emitters.nvtx import phase
    with phase("host", "compile"):      # range "host" in domain "tracea", category "compile"
        ...

The range's message is the phase ("copy", "mma", "reduce", "comm", "host"; Tessera §7), its category
says what Tracea is doing in it ("compile", "verify", "time", "tune", ...); a kernel is timed in its op's
phase (``Op.phase``). With the optional ``nvtx``
package installed (``pip install 'tracea[nvtx]'``) these are real ranges (nearly free when no profiler
is attached); without it ``phase`` is a no-op. The package is imported on first use, never at import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

PHASES = ("copy", "mma", "reduce", "comm", "host")
DOMAIN = "tracea"
# one colour per phase, stable across runs so timelines read the same way
COLORS = {"copy": "blue", "mma": "green", "reduce": "orange", "comm": "purple", "host": "grey"}

_nvtx: Any = None  # the module, False when absent, None before the first look


def available() -> bool:
    """Whether the nvtx package is importable (looked up once)."""
    global _nvtx
    if _nvtx is None:
        try:
            import nvtx as module

            _nvtx = module
        except Exception:  # noqa: BLE001 - absent or broken: ranges become no-ops
            _nvtx = False
    return _nvtx is not False


@contextlib.contextmanager
def phase(name: str, what: str | None = None) -> Iterator[None]:
    """An NVTX range ``name`` (one of PHASES) with category ``what``; a no-op without nvtx."""
    if name not in PHASES:
        raise ValueError(f"NVTX phase {name!r} is not one of {PHASES}")
    if not available():
        yield
        return
    with _nvtx.annotate(message=name, color=COLORS[name], domain=DOMAIN, category=what):
        yield
