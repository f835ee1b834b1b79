"""Apple Silicon GPUs on macOS: chip, GPU cores and Metal version from ``system_profiler``; the Apple GPU
family from the chip's name; unified memory from ``sysctl hw.memsize`` (already in the CPU source's raw answers).

The family is what a Metal kernel's features depend on (``simdgroup_matrix``, threadgroup memory). Apple's
Metal feature set tables (https://developer.apple.com/metal/Metal-Feature-Set-Tables.pdf, and the
``MTLGPUFamily.apple7``-``apple9`` pages of developer.apple.com/documentation/metal/mtlgpufamily) put the
M1 series (M1, Pro, Max, Ultra) in Apple7, the M2 series in Apple8, the M3 series and the M4 in Apple9; the
table of May 2026 puts the M5 series in Apple10. system_profiler on macOS 11 also printed the family itself
(``"spdisplays_metalfamily" : "spdisplays_mtlgpufamilyapple7"``, an M1's output in
https://github.com/exelban/stats/issues/394); where it does, that is used, and the chip's name otherwise.
"""

from __future__ import annotations

import json
import platform
import re
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


# the chip's generation (Apple M<n>) -> its Apple GPU family, from Apple's Metal feature set tables
FAMILY_OF_GENERATION = {1: "apple7", 2: "apple8", 3: "apple9", 4: "apple9", 5: "apple10"}
_GENERATION = re.compile(r"apple\s*m(\d+)(?!\d)", re.IGNORECASE)  # "Apple M1 Pro", "kHW_AppleM1Item"
_REPORTED = re.compile(r"mtlgpufamily(apple\d+)$", re.IGNORECASE)  # "spdisplays_mtlgpufamilyapple7"


def gpu_family(chip: str | None) -> tuple[str | None, str]:
    """(the Apple GPU family of the chip system_profiler names, or None; where it came from or why not)."""
    m = _GENERATION.search(chip or "")
    if m is None:
        return None, f"{chip or 'the chip'} is not an Apple M-series name the family table knows"
    family = FAMILY_OF_GENERATION.get(int(m.group(1)))
    if family is None:
        return None, f"{chip}: M{m.group(1)} is not in Apple's Metal feature set tables as read here (M1-M5)"
    return family, f"table:M{m.group(1)}"


def _family(gpu: dict[str, Any], chip: str | None) -> tuple[str | None, str]:
    """The family system_profiler reports (older macOS) or, failing that, the chip's (``gpu_family``)."""
    reported = _REPORTED.search(str(gpu.get("spdisplays_metalfamily") or ""))
    if reported:
        return reported.group(1).lower(), "system_profiler"
    return gpu_family(chip)


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
        family, why = _family(gpu, model)
        fs.put("gpu_family", family, why, missing_reason=why)
        mem = (sysctl or {}).get("hw.memsize")
        fs.put("unified_memory_bytes", int(mem) if mem and mem.isdigit() else None, "sysctl hw.memsize",
               missing_reason=None if sysctl else "no sysctl answers (hw.memsize) in this report")
        devices.append(fs.build(AppleGpu))
    return AppleSection(devices=devices, reason=None if devices else "system_profiler lists no Apple GPU")
