"""Timing that can be trusted on a noisy machine: warm-up, interleaved repeats of every contender
(so drift in clocks or neighbours hits all alike), or alternating blocks of them (``block``), median
and p95 per contender.

CPU work is timed with ``time.perf_counter`` around complete calls (the kernels are synchronous). A call
shorter than ``MIN_SAMPLE_S`` is repeated inside one sample (the per-call time is the sample over the
count), so the clock's resolution and the interpreter's jitter do not dominate a microsecond kernel.
Whether the samples agree well enough for a ratio is emitters/stability.py's question.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from tracea.doctor.errors import BadInputError

MIN_TIME_S = 0.5  # the least seconds `tracea bench` times each contender on a host
MIN_TIME_ENV = "TRACEA_MIN_TIME"


def min_time_s() -> float:
    """The least seconds ``tracea bench`` times each contender on a host, and the most it pauses before
    measuring an unstable pair again (stability.py): ``$TRACEA_MIN_TIME`` where it is set (CI and a quick look
    time less, a careful comparison more), else ``MIN_TIME_S``. The repeats (``--repeat``) still all run."""
    raw = os.environ.get(MIN_TIME_ENV, "").strip()
    if not raw:
        return MIN_TIME_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 3600):
        raise BadInputError(f"{MIN_TIME_ENV}: expected seconds from 0 to 3600, got {raw!r}",
                            f"unset it for the default {MIN_TIME_S} s")
    return value

# GPU cycles the stream sleeps before each timed call (~250 µs at H100 clocks). PyTorch's dispatch of one
# op costs tens of microseconds of host time, cuDNN's up to ~100; when the GPU finishes an iteration
# (flush, hold, start, op, end) before the host has queued the next, it idles wherever the host is, often
# between the start event and the op, and that idle time is counted (an H100, 2026-11-25: with no hold
# 60 of 79 suite rows spread, cuDNN p95/p50 up to 7; with a 100 µs hold 20 rows, all cuDNN at batch 1, up
# to 10). A hold longer than the host's time per iteration keeps the queue ahead of the GPU, so only the
# op is timed, Tracea's launches and the vendor's alike.
HOLD_CYCLES = 500_000  # emitters/cuda/runtime.py holds Tracea's kernels' streams; device_baselines.py torch's


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


MIN_SAMPLE_S = 0.002  # a sample shorter than this repeats the call inside it
MAX_INNER = 1000


def _calls_per_sample(fn: Callable[[], object]) -> int:
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    return max(1, min(MAX_INNER, math.ceil(MIN_SAMPLE_S / once) if once > 0 else MAX_INNER))


def interleaved(contenders: dict[str, Callable[[], object]], warmup: int = 2, repeats: int = 10,
                min_seconds: float = 0.0, max_repeats: int = 200, block: int = 1,
                gap_s: float = 0.0, rounds_out: list[dict[str, float]] | None = None,
                samples_out: dict[str, list[float]] | None = None) -> dict[str, Timing]:
    """Time each callable ``repeats`` times, round-robin, after ``warmup`` calls each; keep going
    (up to ``max_repeats``) until the total measured time reaches ``min_seconds``.

    ``block`` > 1 takes that many samples of one contender before the next one's turn, each turn after
    ``gap_s`` of sleep and one untimed call. Why: a library whose idle threads busy-wait after a call
    (torch's OpenMP workers spin for milliseconds) would otherwise hold a core during the other side's
    samples; on a 2-core machine that halves the other side. After the gap its workers sleep, and the
    untimed call wakes this side's own pool, so each side is timed back-to-back, at its best.

    ``rounds_out``: each round's median of every contender's block is appended to it, one dict a round (the
    sides of a round ran a few milliseconds apart, so their ratio is one paired sample: stability.paired_ratio).
    ``samples_out``: every sample of each contender is appended to its list (several calls pool their samples:
    ``pooled``)."""
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    inner = {name: _calls_per_sample(fn) for name, fn in contenders.items()}
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    start = time.perf_counter()
    rounds = 0
    while rounds < repeats or (time.perf_counter() - start < min_seconds and rounds < max_repeats):
        # alternate the order each round so neither side always runs on a cache warmed by the other
        order = list(contenders.items()) if rounds % 2 == 0 else list(reversed(contenders.items()))
        for name, fn in order:
            n = inner[name]
            if block > 1:
                time.sleep(gap_s)
                fn()
            for _ in range(block):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                samples[name].append((time.perf_counter() - t0) * 1e3 / n)
        if rounds_out is not None:
            rounds_out.append({name: statistics.median(ms[-block:]) for name, ms in samples.items()})
        rounds += block
    if samples_out is not None:
        for name, ms in samples.items():
            samples_out.setdefault(name, []).extend(ms)
    return pooled(samples)


def pooled(samples: dict[str, list[float]]) -> dict[str, Timing]:
    """Each contender's median, p95 and fastest over its samples (ms a call)."""
    out = {}
    for name, ms in samples.items():
        ms = sorted(ms)
        out[name] = Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))
    return out
