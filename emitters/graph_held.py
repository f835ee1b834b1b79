"""The kernel objects a captured CUDA graph launches on scratch of their own (split-K workspaces and semaphores,
tile plans): a graph holds those buffers' addresses, not the objects, so the objects are kept here from the first
capture that records one of their launches, and ``tracea.ops.clear_cache()`` or a dropped reference cannot free
memory a later replay writes. Kept until the process ends, except what a measurement's own graph pinned:
``release(mark)`` after that graph is destroyed (``tracea.ops``' compile backend times a node in one). Backend
neutral: a GPU backend's kernel object calls ``hold``; the ops layer calls ``mark`` and ``release``."""

from __future__ import annotations

import threading
from typing import Any

HELD: list[Any] = []  # oldest first
_LOCK = threading.Lock()


def hold(kernel: Any) -> None:
    """Keep ``kernel`` (flagged ``_in_graph``, so a later capture does not add it twice)."""
    with _LOCK:
        if not getattr(kernel, "_in_graph", False):
            kernel._in_graph = True
            HELD.append(kernel)


def mark() -> int:
    """How many are held now: ``release``'s argument once the graphs captured after this are gone."""
    return len(HELD)


def release(since: int) -> None:
    """Let go of the kernels held since ``mark()`` returned ``since`` (every graph captured since then destroyed);
    a later capture holds them again."""
    with _LOCK:
        for k in HELD[since:]:
            k._in_graph = False
        del HELD[since:]
