"""The environment fingerprint: what a measured result or a tuned schedule depends on. A change in any
part (device, driver, compiler, CPU flags, Tracea version) is a different fingerprint, so a stored
result is a miss, never a stale hit."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .report import HostReport


def environment(host: HostReport, backend: str) -> dict[str, Any]:
    cpu = host.cpu
    env: dict[str, Any] = {
        "tracea": host.tracea_version,
        "backend": backend,
        "cpu": cpu.model,
        "machine": cpu.architecture,
        "isa": cpu.isa,
    }
    if backend == "cpu":
        cc = next((t for t in host.toolchains if t.name in ("cc", "gcc", "clang") and t.found), None)
        env["compiler"] = f"{cc.name} {cc.version} {cc.details.get('realpath')}" if cc else None
        env["threads"] = cpu.logical_cores
    elif backend == "cuda":
        env["gpus"] = [(g.name, g.compute_capability, g.sm_count) for g in host.nvidia.devices]
        env["driver"] = host.nvidia.driver_version
        nvrtc = host.tool("nvrtc")
        env["nvrtc"] = nvrtc.version if nvrtc and nvrtc.found else None
    return env


def fingerprint(host: HostReport, backend: str) -> str:
    blob = json.dumps(environment(host, backend), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
