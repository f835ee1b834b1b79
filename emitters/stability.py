"""When a pair of timings may be turned into a ratio, and when it must not.

A ratio baseline/Tracea is printed or stored only from measurements that agree with themselves:

* spread: each contender's p95 within ``SPREAD_LIMIT`` of its median, and its median within
  ``SPREAD_LIMIT`` of its fastest sample. A wider spread means something else ran on the cores during the
  measurement (a dashboard repainting, a compiler, a neighbour), and the median of such samples says more
  about the neighbour than about the kernel;
* drift: where a run measured the same thing twice (a tune's baseline at its start and at its end, the
  best candidate during the search and in the final timing), the two medians within ``DRIFT_LIMIT``.
  A baseline that took 0.5 ms at the start and 16 ms at the end was disturbed at one of the two, and no
  ratio built on either can be trusted.

* pairing: where two contenders were timed in alternating rounds (timing.interleaved's ``rounds_out``) and
  their spread is too wide, the ratio may still be printed when the rounds agree on it: each round's
  ratio (its two blocks ran milliseconds apart, under the same state of the machine) is one paired sample,
  and the median of those samples has a distribution-free 95 % interval (order statistics) no wider than
  ``PAIRED_LIMIT`` that holds the ratio of the two medians, which is then printed as usual. The interval
  assumes independent rounds; rounds milliseconds apart on a drifting machine are not quite, so it is
  optimistic, and the 1.10x bound is kept tight for that reason. On a 2-core VM whose memory bandwidth
  moves from one 10 ms to the next (2026-11-29, AMD EPYC, softmax 8192x512: each side p50/min 1.2-1.9,
  the ratio of medians 1.21-1.26 in six measurements), the sides' spread says the machine is noisy, not
  that the ratio is unknown. The interval is reported with the ratio.

An unstable measurement is taken again (``measure_stable``, up to ``ATTEMPTS`` times, with a pause to let
the disturbance pass); if it stays unstable it is reported as unstable, with the figures, never as a ratio.
Where pairing may still settle it (a host pair: every attempt's rounds are pooled), attempts go on, up to
``PAIRED_ATTEMPTS`` and ``PAIRED_SECONDS`` times ``timing.min_time_s()``: the interval narrows as rounds are
added (about as one over their count's square root), so a ratio a few rounds left open is often pinned down
by more. On the CI-class Xeon VM (2026-12-01, ``benchmarks/probe_cpu_bursts.py``) a scalar loop on either core ran
over 1.5x slower in 1-10 % of its 50 us slices, in bursts up to a millisecond (the host taking the vCPUs back):
no measurement of a few hundred milliseconds there is free of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .timing import min_time_s

SPREAD_LIMIT = 1.35  # p95 / p50 of one contender
DRIFT_LIMIT = 0.25  # |log(after / before)| <= log(1.25): two medians of the same thing within 25 %
ATTEMPTS = 3
PAUSE_S = 0.5  # between attempts: a compile or a repaint that disturbed one attempt has usually passed
PAIRED_ATTEMPTS = 12  # attempts while pooled rounds may still settle the ratio (``measure_stable``'s ``extend``)
PAIRED_SECONDS = 60  # ... and while measuring has taken less than this many times timing.min_time_s()

T = TypeVar("T")


def _ms(t: Any, key: str) -> float | None:
    value = t.get(key) if isinstance(t, Mapping) else getattr(t, key, None)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def spread_problem(timings: Mapping[str, Any]) -> str | None:
    """Why these timings (name -> Timing, or dict with p50_ms / p95_ms) are too spread for a ratio, or None."""
    bad = []
    for name, t in timings.items():
        p50, p95, low = _ms(t, "p50_ms"), _ms(t, "p95_ms"), _ms(t, "min_ms")
        if p50 is None or p50 <= 0:
            continue
        if p95 is not None and p95 / p50 > SPREAD_LIMIT:
            bad.append(f"{name} p95/p50 = {p95 / p50:.2f} ({p95:.3f} / {p50:.3f} ms)")
        elif low is not None and low > 0 and p50 / low > SPREAD_LIMIT:
            bad.append(f"{name} p50/min = {p50 / low:.2f} ({p50:.3f} / {low:.3f} ms)")
    return "; ".join(bad) or None


PAIRED_LIMIT = 1.10  # the paired ratio's 95 % interval: high / low at most this
MIN_PAIRED_ROUNDS = 12  # fewer rounds give an interval of order statistics too coarse to trust


def sign_test_rank(n: int, alpha: float = 0.05) -> int:
    """The largest k with P(Binomial(n, 1/2) <= k) <= alpha / 2: the sorted samples r[k] and r[n - 1 - k]
    (0-based) then bracket the median with probability 1 - 2 P(B <= k) >= 1 - alpha, exactly, for any
    continuous distribution of independent samples; -1 where n is too small for any such k."""
    total, cdf, k = 2.0 ** n, 0.0, -1
    for i in range(n + 1):
        cdf += math.comb(n, i) / total
        if cdf > alpha / 2:
            return k
        k = i
    return k


def paired_ratio(rounds: list[Mapping[str, float]], num: str, den: str) -> tuple[float, float, float, int] | None:
    """(median, low, high, rounds) of the per-round ratios ``num / den``: the low and high order statistics
    bracket the median with at least 95 % confidence whatever the distribution (the sign test's interval,
    ``sign_test_rank``); None with fewer than ``MIN_PAIRED_ROUNDS`` usable rounds."""
    r = sorted(x[num] / x[den] for x in rounds if x.get(num, 0) > 0 and x.get(den, 0) > 0)
    n = len(r)
    if n < MIN_PAIRED_ROUNDS:
        return None
    k = sign_test_rank(n)  # 0-based: r[k] .. r[n - 1 - k]
    mid = r[n // 2] if n % 2 else (r[n // 2 - 1] + r[n // 2]) / 2
    return mid, r[k], r[n - 1 - k], n


def paired_verdict(timings: Mapping[str, Any], rounds: list[Mapping[str, float]], num: str, den: str,
                   names: Mapping[str, str] | None = None, need_pairing: bool = False
                   ) -> tuple[str | None, tuple[float, float, int, float] | None]:
    """(problem, interval): the spread problem of ``timings`` (None: stable as they are), unless the rounds pin
    the ratio ``num / den`` down: ``paired_ratio``'s interval within ``PAIRED_LIMIT`` and the ratio of the two
    medians near it; then (None, (low, high, rounds, ratio)). The ratio is the medians' where the interval holds
    it (the row's times agree with its ratio), else the rounds' median, where the medians' ratio lies outside
    the interval by at most ``PAIRED_LIMIT`` (both sides' times moved while they were measured, the rounds'
    ratios did not: the note says so, ``BenchResult.paired_note``). An unsettled pairing adds its interval to the
    problem. ``names``: how the problem names each contender (default: its key). ``need_pairing``: timings that
    agree with themselves settle nothing (pooled attempts, each too spread alone, may pass the spread check while
    they came from two states of the machine): only the interval does."""
    names = names or {}
    why = spread_problem({names.get(k, k): v for k, v in timings.items()})
    if why is None and not need_pairing:
        return None, None
    why = why or "the attempts' timings differ"
    pr = paired_ratio(rounds, num, den)
    p50n, p50d = _ms(timings.get(num), "p50_ms"), _ms(timings.get(den), "p50_ms")
    if pr is None or not p50n or not p50d:
        return why, None
    mid, lo, hi, n = pr
    medians = p50n / p50d
    if hi / lo <= PAIRED_LIMIT and lo <= medians <= hi:
        return None, (lo, hi, n, medians)
    if hi / lo <= PAIRED_LIMIT and lo / PAIRED_LIMIT <= medians <= hi * PAIRED_LIMIT:
        return None, (lo, hi, n, mid)
    return why + interval_text(rounds, num, den), None


def interval_text(rounds: list[Mapping[str, float]], num: str, den: str) -> str:
    """What an unsettled problem adds about the rounds: their interval, or nothing with too few rounds."""
    pr = paired_ratio(rounds, num, den)
    return f"; the paired ratio's 95 % interval over {pr[3]} rounds is {pr[1]:.3f}-{pr[2]:.3f}" if pr else ""


def pairing_may_settle(rounds: list[Mapping[str, float]], num: str, den: str) -> bool:
    """Whether more rounds may still narrow the paired interval of ``num / den`` to ``PAIRED_LIMIT``: too few
    rounds for one yet, or one at most three times as wide (in log terms) as the limit (nine times the rounds
    would about narrow it to the limit; on the 2-vCPU Xeon one row's interval went from 1.23x over 28 rounds to
    1.08x over 37 in two runs of the suite, the machine's state between them). Wider intervals (the rounds
    disagree) stop ``measure_stable``'s extension."""
    pr = paired_ratio(rounds, num, den)
    return pr is None or math.log(pr[2] / pr[1]) <= 3 * math.log(PAIRED_LIMIT)


def drift_problem(name: str, before_ms: float | None, after_ms: float | None) -> str | None:
    """Why two medians of the same measurement disagree too much for either to be trusted, or None."""
    if not before_ms or not after_ms or before_ms <= 0 or after_ms <= 0:
        return None
    if abs(math.log(after_ms / before_ms)) > math.log1p(DRIFT_LIMIT):
        return f"{name} took {before_ms:.3f} ms earlier and {after_ms:.3f} ms now"
    return None


def measure_stable(measure: Callable[[], T], problem: Callable[[T], str | None], attempts: int = ATTEMPTS,
                   pause_s: float | None = None, extend: Callable[[], bool] | None = None) -> tuple[T, str | None]:
    """Run ``measure`` until ``problem(result)`` is None, at most ``attempts`` times: (the last result, None)
    when it settled, else (the last result, "unstable in N measurements: <the last problem>"). ``pause_s``
    between attempts: None for ``PAUSE_S``, or less where ``$TRACEA_MIN_TIME`` asks for shorter timing
    (``timing.min_time_s``). ``extend``: the measurements pool their rounds (``paired_verdict``), so more of
    them may settle the ratio: while it returns True, attempts go on past ``attempts``, up to
    ``PAIRED_ATTEMPTS``, while measuring has taken less than ``PAIRED_SECONDS`` times ``min_time_s()`` (an
    unsettled measurement is always taken ``attempts`` times)."""
    if pause_s is None:
        pause_s = min(PAUSE_S, min_time_s())
    most = max(attempts, PAIRED_ATTEMPTS) if extend else attempts
    budget_s = PAIRED_SECONDS * min_time_s()
    start = time.perf_counter()
    result = measure()
    attempt = 1
    while True:
        why = problem(result)
        if why is None:
            return result, None
        if attempt >= most or (attempt >= attempts and (time.perf_counter() - start >= budget_s
                                                        or not (extend and extend()))):
            return result, f"unstable in {attempt} measurements: {why}"
        time.sleep(pause_s)
        result = measure()
        attempt += 1
