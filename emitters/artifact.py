"""The record of one compiled kernel, the same for every backend: what was compiled (op, variant, schedule,
source, language, entry point), how (compiler, its version, flags), where the binary is, and whether the
compile cache held it. Reports, bundles and replays read it; each backend's runtime loads from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Artifact:
    """Everything needed to see, rebuild and replay one compiled kernel."""

    name: str
    op: dict[str, Any]
    variant: str
    schedule: dict[str, Any]
    source: str
    language: str
    entry: str
    compiler: str  # path
    compiler_version: str
    flags: tuple[str, ...]
    binary: str  # path of the shared object
    cache_hit: bool
    compile_seconds: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "op": self.op, "variant": self.variant, "schedule": self.schedule,
            "source": self.source, "language": self.language, "entry": self.entry, "compiler": self.compiler,
            "compiler_version": self.compiler_version, "flags": list(self.flags), "binary": self.binary,
            "cache_hit": self.cache_hit, "compile_seconds": self.compile_seconds, "metadata": self.metadata,
        }
