"""Daemon-thread tasks for the probes: a hung driver call or compiler costs its own answer, never the
report, and never blocks the interpreter's exit (ThreadPoolExecutor's workers would)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Task:
    """Runs ``fn`` on a daemon thread; ``result(deadline)`` waits until ``time.monotonic()`` reaches it."""

    def __init__(self, name: str, fn: Callable[[], Any], timeout_s: float = 30.0) -> None:
        self.name, self.fn, self.timeout_s = name, fn, timeout_s
        self.done = threading.Event()
        self.value: Any = None
        threading.Thread(target=self._run, name=f"tracea-probe-{name}", daemon=True).start()

    def _run(self) -> None:
        try:
            self.value = self.fn()
        finally:
            self.done.set()

    def result(self, deadline: float | None = None) -> Any:
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        if not self.done.wait(max(0.0, deadline - time.monotonic())):
            return {"status": "error", "error": "Timeout",
                    "message": f"{self.name} did not answer within {self.timeout_s:.0f} s (a hung driver call?)"}
        return self.value
