"""The host around the hardware: OS, WSL, container, device nodes, and the environment variables that
change what the doctor sees (never secrets: only the names listed here are recorded).
"""

from __future__ import annotations

import glob
import os
import platform
from pathlib import Path
from typing import Any

from ..blas_pin import BLAS_ENV_KEYS
from ..report import FieldSet, HostInfo

ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "WSL_DISTRO_NAME", "CUDA_HOME", "CUDA_PATH",
    *BLAS_ENV_KEYS,  # what pins NumPy's BLAS (blas_pin.py): replayed with --input like the rest
)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def collect() -> dict[str, Any]:
    proc_version = _read("/proc/version")
    container = None
    if os.path.exists("/.dockerenv"):
        container = "docker"
    elif os.path.exists("/run/.containerenv"):
        container = "podman"
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        container = "kubernetes"
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "proc_version": proc_version,
        "wsl": bool(os.environ.get("WSL_DISTRO_NAME")) or "microsoft" in (proc_version or "").lower(),
        "container": container,
        "dev_nvidia": sorted(glob.glob("/dev/nvidia[0-9]*")),
        "dev_kfd": os.path.exists("/dev/kfd"),
    }


def collect_env() -> dict[str, str]:
    return {k: os.environ[k] for k in ENV_KEYS if k in os.environ}


def interpret(raw: dict[str, Any] | None) -> HostInfo:
    raw = raw or {}
    fs = FieldSet()
    fs.put("os_name", raw.get("system"), "platform")
    fs.put("os_release", raw.get("release"), "platform")
    fs.put("machine", raw.get("machine"), "platform")
    fs.put("wsl", raw.get("wsl"), "/proc/version")
    fs.put("container", raw.get("container"), "/.dockerenv, /run/.containerenv", "no container detected")
    return fs.build(HostInfo)
