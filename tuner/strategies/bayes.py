"""Bayesian optimisation over the enumerated candidates.

- Start: the hero configurations, then a small space-filling sample in which the heroes count as points
  already taken: one candidate drawn by the seed, then greedy max-min distance in the encoded space
  (random tie-breaks from the seed). The hero does not pull the start towards itself: a hero that is
  good but not the best sits in its own basin, and starting next to it (as an earlier version did, with
  its nearest neighbour) spent the budget on that basin (0.942 of the optimum at 10 % of the H200 mma.sync
  space, benchmarks/bench_tuner.py).
- Model: a Gaussian process on log(median ms) (ratios matter, not milliseconds) with a Matern 3/2 kernel,
  one length scale per encoded column (the schedule's fields and the backend's derived features, see
  tuner/space.py ``encode``), a signal and a noise variance (tuner/strategies/gp.py). Hyperparameters are
  the posterior mode under a log-normal prior on the length scales (median: the encoded range of a
  field): with a dozen points and a dozen columns, unregularised marginal likelihood picks extreme
  length scales that make the model confident away from the data.
- Acquisition: expected improvement over every untried candidate, counting only improvement beyond
  ``XI`` (3 %): gains smaller than that are within run-to-run spread and are what the incumbent's
  neighbours offer, so a small margin exploits the incumbent (the hero) before exploring.
- Failed candidates inform the search: they enter the model at a penalised value (slower than the
  slowest working candidate), so their neighbourhood is avoided; they are never proposed again.
"""

from __future__ import annotations

import math
from typing import Any

from .common import Observed, Strategy

FAIL_PENALTY = 0.5  # log units above the slowest working candidate (about 1.6x slower)
XI = 0.03  # the improvement that counts, in log-time units (about 3 %)
RESTART_EVERY = 3  # a random restart of the hyperparameter fit every few fits (warm starts between)
REFIT_ALWAYS = 40  # observations below which every step refits the hyperparameters


def initial_count(n: int) -> int:
    """Space-filling points after the heroes: about 1.5 % of the space, at least 3, at most 8."""
    return max(3, min(8, round(0.015 * n)))


class Bayes(Strategy):
    name = "bayes"

    def __init__(self, x: Any, seed: int, n_hero: int = 1) -> None:
        from .gp import GP

        super().__init__(x, seed, n_hero)
        self.seed = seed
        self.n_init = initial_count(self.n)
        self._ranking: list[int] = []
        self.gp = GP(max(1, self.x.shape[1]))
        self.fits = 0
        self.fitted_on = 0  # observations at the last hyperparameter fit

    def _space_filling(self, observed: Observed) -> int | None:
        import numpy as np

        chosen = list(observed)
        untried = np.array([i for i in range(self.n) if i not in observed])
        if not len(untried):
            return None
        if len(observed) <= self.n_hero or self.x.shape[1] == 0:  # the seed decides where the sample starts
            return int(self.rng.choice(untried))
        d = np.min(np.linalg.norm(self.x[untried, None, :] - self.x[None, chosen, :], axis=2), axis=1)
        best = np.flatnonzero(d >= d.max() - 1e-12)
        return int(untried[self.rng.choice(best)])

    def order(self, observed: Observed) -> list[int]:
        if len(observed) < self.n_hero + self.n_init:
            nxt = self._space_filling(observed)
            return [] if nxt is None else [nxt]
        self._ranking = self._expected_improvement(observed)
        return self._ranking

    def upcoming(self, observed: Observed, current: int, count: int) -> list[int]:
        """The next best by the last expected-improvement ranking (none during the space-filling start)."""
        return [i for i in self._ranking if i not in observed and i != current][:count]

    def _expected_improvement(self, observed: Observed) -> list[int]:
        import numpy as np
        from scipy.special import ndtr

        untried = np.array([i for i in range(self.n) if i not in observed])
        if not len(untried):
            return []
        idx = np.array(list(observed))
        ok = {i: math.log(v) for i, v in observed.items() if v is not None and v > 0}
        if not ok:  # nothing works yet: keep exploring space-fillingly
            nxt = self._space_filling(observed)
            return [] if nxt is None else [nxt]
        worst = max(ok.values())
        y = np.array([ok.get(int(i), worst + FAIL_PENALTY) for i in idx])
        xs = self.x if self.x.shape[1] else np.zeros((self.n, 1))
        with _one_thread():
            # hyperparameters refitted while the data are few, then each time they grew by a tenth: on a
            # space of thousands a run of hundreds would otherwise spend minutes fitting
            optimise = len(idx) < REFIT_ALWAYS or len(idx) >= 1.1 * self.fitted_on
            gp = self.gp.fit(xs[idx], y, self.rng, restarts=int(self.fits % RESTART_EVERY == 0), optimise=optimise)
            if optimise:
                self.fits += 1
                self.fitted_on = len(idx)
            mu, sigma = gp.predict(xs[untried])
            # the incumbent is the model's best mean at a working observed point, not the luckiest raw
            # measurement: with estimated noise, one fast outlier does not end the search around it
            best = float(np.min(gp.predict(xs[np.array(list(ok))])[0]))
        imp = best - mu - XI
        z = imp / sigma
        ei = imp * ndtr(z) + sigma * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        # ties (e.g. all zero far from data) broken at random by the seed, then by predicted mean
        jitter = self.rng.random(len(untried)) * 1e-12
        return [int(untried[j]) for j in np.lexsort((mu, -(ei + jitter)))]


_CONTROLLER: Any = None  # threadpoolctl's view of the loaded BLAS libraries, found once per process


def _one_thread() -> Any:
    """BLAS on one thread while fitting: the matrices are tens of rows, and a multi-threaded BLAS on a
    busy machine spends 10x the time spinning (measured on the 2-core CI machine). The libraries are
    looked up once: a lookup walks every loaded shared object, which cost a tenth of a search's time."""
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - scikit-learn brings it
        import contextlib

        return contextlib.nullcontext()
    if _CONTROLLER is None:
        import numpy  # noqa: F401 - the BLAS the model uses, loaded before the lookup
        import scipy.optimize  # noqa: F401

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1)
