"""Apple Silicon GPUs on macOS: chip, GPU cores and Metal family from ``system_profiler``; unified memory
from ``sysctl hw.memsize`` (already in the CPU source's raw answers).
"""

from __future__ import annotations

import json
import platform
import subprocess
from typing import Any

from ..report import AppleGpu, AppleSection, FieldSet


def collect() -> dict[str, Any]:
    system = platform.system()
    if system != "Darwin":
        return {"status": "error", "error": "NotMacOS", "message": f"not macOS ({system})"}
    try:
        out = subprocess.run(
            ["system_profiler", "SPDisplaysDataType", "-json"], capture_output=True, text=True, timeout=15
        )
        return {"status": "ok", "spdisplays": json.loads(out.stdout or "{}")}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return {"status": "error", "error": type(exc).__name__, "message": str(exc)}


def _metal_family(value: str | None) -> str | None:
    if not value:
        return None
    # "spdisplays_metal3" -> "Metal 3"
    tail = value.removeprefix("spdisplays_")
    return tail.replace("metal", "Metal ").strip() if tail.startswith("metal") else tail


def interpret(raw: dict[str, Any] | None, sysctl: dict[str, str] | None) -> AppleSection:
    raw = raw or {}
    if raw.get("status") != "ok":
        return AppleSection(devices=[], reason=raw.get("message") or "not collected")
    devices = []
    for gpu in raw.get("spdisplays", {}).get("SPDisplaysDataType", []):
        vendor = str(gpu.get("spdisplays_vendor", "")) + str(gpu.get("sppci_vendor", ""))
        model = gpu.get("sppci_model") or gpu.get("_name")
        if "apple" not in vendor.lower() and not str(model or "").startswith("Apple"):
            continue  # an Intel Mac's discrete or integrated GPU: not Apple Silicon
        fs = FieldSet()
        src = "system_profiler"
        fs.put("chip", model, src)
        cores = gpu.get("sppci_cores")
        fs.put("gpu_cores", int(cores) if str(cores or "").isdigit() else None, src)
        fs.put("metal_family", _metal_family(gpu.get("spdisplays_mtlgpufamilysupport")), src)
        mem = (sysctl or {}).get("hw.memsize")
        fs.put("unified_memory_bytes", int(mem) if mem and mem.isdigit() else None, "sysctl hw.memsize")
        devices.append(fs.build(AppleGpu))
    return AppleSection(devices=devices, reason=None if devices else "system_profiler lists no Apple GPU")
