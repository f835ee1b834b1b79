"""Each distinct cubin loaded once per process: kernels built for different op signatures from the same
source (ResNet-50's eleven batch-1 1x1 convolutions share one) get the same module and the same function.
Before, each signature loaded its own copy: a patched ResNet-50 at batch 1 held 31 distinct functions in its
graph, now 14; the graph's speed did not change with it (docs/device-runs/h200-graph-kernel-modules/), but the
first call of a signature whose cubin is loaded skips the load, and the device holds each kernel's code once.

Two ways in, as the kernels load today: ``library(binary)`` (cuda-core's ``ObjectCode``, a context-
independent library: ``runtime.CudaKernel``) and ``module(cubin)`` (``cuModuleLoadData`` in the current
context: ``tma.Launcher``, the Hopper kernels). Both are keyed by the binary's SHA-256 (and the context for a
module). ``allow_smem`` raises a function's dynamic shared-memory limit and never lowers it, so kernels that
share a function cannot undo each other's limit. Nothing is unloaded: the kernels of a process stay
loaded until it ends, as before (now once each).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

_LOCK = threading.Lock()
_LIBRARIES: dict[bytes, Any] = {}
_MODULES: dict[tuple[int, bytes], Any] = {}
_SMEM: dict[tuple[str, int], int] = {}  # (kind, handle) -> dynamic shared memory allowed
STATS = {"loads": 0, "shared": 0}


def _bytes(binary: bytes | str | Path) -> bytes:
    return binary if isinstance(binary, (bytes, bytearray)) else Path(binary).read_bytes()


def library(binary: bytes | str | Path) -> Any:
    """cuda-core's ``ObjectCode`` for ``binary`` (a cubin's bytes or path), loaded on the first request."""
    from cuda.core import ObjectCode

    data = bytes(_bytes(binary))
    key = hashlib.sha256(data).digest()
    with _LOCK:
        got = _LIBRARIES.get(key)
        if got is None:
            got = _LIBRARIES[key] = ObjectCode.from_cubin(data)
            STATS["loads"] += 1
        else:
            STATS["shared"] += 1
        return got


def module(cubin: bytes, load: Any, current_context: Any) -> Any:
    """The ``CUmodule`` of ``cubin`` in the current context: ``load(cubin)`` (cuModuleLoadData) on the
    first request for this context, the same module after that. ``current_context()`` returns the handle."""
    key = (int(current_context()), hashlib.sha256(cubin).digest())
    with _LOCK:
        got = _MODULES.get(key)
        if got is None:
            got = _MODULES[key] = load(cubin)
            STATS["loads"] += 1
        else:
            STATS["shared"] += 1
        return got


def allow_smem(kind: str, handle: Any, nbytes: int, set_limit: Any) -> None:
    """Make sure ``handle`` (a function or kernel, ``kind`` names which) may take ``nbytes`` of dynamic
    shared memory: ``set_limit(nbytes)`` where no kernel sharing it asked for as much before."""
    key = (kind, int(handle))
    with _LOCK:
        if _SMEM.get(key, -1) >= nbytes:
            return
        set_limit(nbytes)
        _SMEM[key] = nbytes


def allow_dynamic_smem(driver: Any, handle: Any, device_id: int, nbytes: int) -> None:
    """``allow_smem`` for cuda-core's kernel ``handle`` (a ``CUkernel``, set per device, or a ``CUfunction``)
    through cuda-bindings' ``driver``; a refusal is a ``LaunchError``."""
    from tracea.doctor.errors import LaunchError

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    library_kernel = isinstance(handle, driver.CUkernel)

    def set_limit(n: int) -> None:
        res = (driver.cuKernelSetAttribute(attr, n, handle, device_id) if library_kernel
               else driver.cuFuncSetAttribute(handle, attr, n))
        err = res[0] if isinstance(res, tuple) else res
        if int(err) != 0:
            raise LaunchError(f"allowing {n} B of dynamic shared memory failed: {err}")

    allow_smem(f"kernel {device_id}" if library_kernel else "function", handle, nbytes, set_limit)
