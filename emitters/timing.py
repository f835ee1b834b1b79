"""Timing that can be trusted on a noisy machine: warm-up, interleaved repeats of every contender
(so drift in clocks or neighbours hits all alike), median and p95 per contender.

CPU work is timed with ``time.perf_counter`` around complete calls (the kernels are synchronous).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    p50_ms: float
    p95_ms: float
    min_ms: float
    runs: int

    def to_json(self) -> dict[str, float | int]:
        return dict(self.__dict__)


def _p95(sorted_ms: list[float]) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, round(0.95 * (len(sorted_ms) - 1)))]


def interleaved(contenders: dict[str, Callable[[], object]], warmup: int = 2, repeats: int = 10,
                min_seconds: float = 0.0, max_repeats: int = 200) -> dict[str, Timing]:
    """Time each callable ``repeats`` times, round-robin, after ``warmup`` calls each; keep going
    (up to ``max_repeats``) until the total measured time reaches ``min_seconds``."""
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    start = time.perf_counter()
    rounds = 0
    while rounds < repeats or (time.perf_counter() - start < min_seconds and rounds < max_repeats):
        # alternate the order each round so neither side always runs on a cache warmed by the other
        order = list(contenders.items()) if rounds % 2 == 0 else list(reversed(contenders.items()))
        for name, fn in order:
            t0 = time.perf_counter()
            fn()
            samples[name].append((time.perf_counter() - t0) * 1e3)
        rounds += 1
    out = {}
    for name, ms in samples.items():
        ms.sort()
        out[name] = Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))
    return out
