"""The kernel objects a captured CUDA graph launches on scratch of their own (split-K workspaces and semaphores,
tile plans): a graph holds those buffers' addresses, not the objects, so the objects are kept here from the first
capture that records one of their launches, and ``tracea.ops.clear_cache()`` or a dropped reference cannot free
memory a later replay writes. A hold belongs to the process (kept until it ends), or, made by a thread inside
``measuring()``, to that measurement alone: let go when it ends, its graph destroyed (``tracea.ops``' compile
backend times a node in a graph of its own). A kernel stays while any holder remains, so a user's graph captured
meanwhile in another thread, or of the same kernel, keeps it. Backend neutral: a GPU backend's kernel object calls
``hold`` at every captured launch; the ops layer opens ``measuring``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PROCESS = "process"
HELD: dict[int, tuple[Any, set[Any]]] = {}  # id(kernel) -> (kernel, its holders: PROCESS or a measurement's token)
_LOCK = threading.Lock()
_LOCAL = threading.local()


def hold(kernel: Any) -> None:
    """``kernel`` is launched inside a capture: held by this thread's measurement, if one is open, else by the
    process."""
    owner = getattr(_LOCAL, "token", None) or PROCESS
    with _LOCK:
        HELD.setdefault(id(kernel), (kernel, set()))[1].add(owner)


def held(kernel: Any) -> bool:
    return id(kernel) in HELD


@contextmanager
def measuring() -> Iterator[None]:
    """The holds this thread makes inside belong to the measurement; when it ends (its graph destroyed inside the
    block), each of them is dropped, and a kernel no one else holds is let go."""
    token, before = object(), getattr(_LOCAL, "token", None)
    _LOCAL.token = token
    try:
        yield
    finally:
        _LOCAL.token = before
        with _LOCK:
            for key, (_, owners) in list(HELD.items()):
                owners.discard(token)
                if not owners:
                    del HELD[key]
