"""How much host memory verifying an op takes, and a check that this machine has it, made before
anything is allocated: an op too large is one clear error ("this needs N GiB, the machine has M GiB
available"), not a MemoryError in the middle of a run.
"""

from __future__ import annotations

import math
from pathlib import Path

from tracea.doctor.errors import UnsupportedError

from .op import Op

GIB = 2**30


def host_bytes(op: Op) -> int:
    """The host memory bench, replay and the tuner's worker hold for ``op`` at their peak: the random
    inputs in their storage type (drawn through float32), the float64 copies the reference makes of
    them, the float64 reference and one temporary of its size, the output buffer, and the float64
    copy and difference the verification makes of it."""
    size = op.dtype.itemsize  # type: ignore[attr-defined]
    shapes = op.shapes()  # type: ignore[attr-defined]
    inputs = sum(math.prod(shape) * (op.input_dtype(n).itemsize + 8) for n, shape in shapes.items())
    largest = max(math.prod(shape) for shape in shapes.values())
    out = math.prod(op.output_shape())  # type: ignore[attr-defined]
    return inputs + largest * 4 + out * (size + 4 * 8)


def available_bytes() -> int:
    """Memory this process can still take: the system's available memory, and below it the cgroup's
    limit when a container sets one (/proc/meminfo shows the host's memory there)."""
    import psutil

    free = int(psutil.virtual_memory().available)
    cgroup = Path("/sys/fs/cgroup")
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            free = min(free, int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):  # no cgroup v2 limit here
        pass
    return max(free, 0)


def require_host_memory(op: Op) -> None:
    """Raise ``UnsupportedError`` when ``op``'s inputs, reference and output cannot fit in memory now."""
    need = host_bytes(op)
    have = available_bytes()
    if need > have:
        raise UnsupportedError(
            f"{op.signature}: this needs {need / GIB:.1f} GiB of memory (inputs, float64 reference and "
            f"output), the machine has {have / GIB:.1f} GiB available",
            "use smaller sizes, or free memory and try again")


def out_of_memory_message() -> str:
    """The line for a MemoryError that happened anyway (the estimate above is not a guarantee)."""
    try:
        return f"out of memory: the machine has {available_bytes() / GIB:.1f} GiB available"
    except Exception:  # noqa: BLE001 - the message must not fail on top of an out-of-memory
        return "out of memory"
