"""Tracea's L3: probes the host (CPU, NVIDIA, AMD, Apple, toolchains, Python) into a ``HostReport``.

Nothing here imports Typer or Textual; heavy modules (pynvml, cuda-core, amdsmi) load only inside the
probes that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .report import HostReport

__all__ = ["probe", "load_snapshot", "build_report", "collect_raw", "HostReport"]


def __getattr__(name: str) -> Any:
    if name in ("probe", "load_snapshot", "build_report", "collect_raw"):
        from . import snapshot

        return getattr(snapshot, name)
    if name == "HostReport":
        from .report import HostReport

        return HostReport
    raise AttributeError(name)
