"""Bayesian optimisation over the enumerated candidates.

- Start: the hero configurations; then the nearest neighbour of the best working hero in the encoded
  space (a hero tuned on another shape or device is usually good up to one field, such as the pipeline
  depth); then a small space-filling sample: one candidate drawn by the seed, then greedy max-min
  distance in the encoded space (random tie-breaks from the seed).
- Model: a Gaussian process on log(median ms) (ratios matter, not milliseconds), a Matern 3/2 kernel with
  one length scale per encoded column (the schedule's fields and the backend's derived features, see
  tuner/space.py ``encode``), times a constant, plus a WhiteKernel so the measurement noise is
  estimated; all hyperparameters are fitted to the data (marginal likelihood, a few restarts). Matern 3/2
  rather than 5/2: tile spaces have sharp interactions (a 256x128 block beats 128x256 by 10 % on the
  H200 space), which the rougher kernel follows with fewer points (benchmarks/bench_tuner.py).
- Acquisition: expected improvement over every untried candidate.
- Failed candidates inform the search: they enter the model at a penalised value (slower than the
  slowest working candidate), so their neighbourhood is avoided; they are never proposed again.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from .common import Observed, Strategy

FAIL_PENALTY = 0.5  # log units above the slowest working candidate (about 1.6x slower)
XI = 0.01  # exploration margin of expected improvement, in log-time units (about 1 %)


def initial_count(n: int) -> int:
    """Space-filling points after the heroes: about 1.5 % of the space, at least 3, at most 8."""
    return max(3, min(8, round(0.015 * n)))


class Bayes(Strategy):
    name = "bayes"

    def __init__(self, x: Any, seed: int, n_hero: int = 1) -> None:
        super().__init__(x, seed, n_hero)
        self.seed = seed
        self.n_init = initial_count(self.n)
        self._ranking: list[int] = []

    def _space_filling(self, observed: Observed) -> int | None:
        import numpy as np

        chosen = list(observed)
        untried = np.array([i for i in range(self.n) if i not in observed])
        if not len(untried):
            return None
        if not chosen or self.x.shape[1] == 0:
            return int(self.rng.choice(untried))
        heroes = [(v, i) for i, v in observed.items() if i < self.n_hero and v is not None]
        after = len(observed) - self.n_hero  # points taken after the heroes
        if heroes and after == 0:  # first after the heroes: the best hero's nearest neighbour
            d = np.linalg.norm(self.x[untried] - self.x[min(heroes)[1]], axis=1)
            near = np.flatnonzero(d <= d.min() + 1e-12)
            return int(untried[self.rng.choice(near)])
        if after == (1 if heroes else 0):  # then one at random: the seed decides where the sample starts
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
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

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
        d = max(1, self.x.shape[1])
        kernel = (ConstantKernel(1.0, (1e-3, 1e3)) * Matern(length_scale=np.full(d, 0.5), length_scale_bounds=(0.05, 20.0),
                                                            nu=1.5)
                  + WhiteKernel(1e-2, (1e-6, 1.0)))
        gp = GaussianProcessRegressor(kernel=kernel, normalize_y=True, n_restarts_optimizer=2,
                                      random_state=int(self.rng.integers(2**31)))
        xs = self.x if self.x.shape[1] else np.zeros((self.n, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(xs[idx], y)
            mu, sigma = gp.predict(xs[untried], return_std=True)
            # the incumbent is the model's best mean at a working observed point, not the luckiest raw
            # measurement: with estimated noise, one fast outlier does not end the search around it
            ok_idx = np.array(list(ok))
            best = float(np.min(gp.predict(xs[ok_idx])))
        sigma = np.maximum(sigma, 1e-12)
        imp = best - mu - XI
        z = imp / sigma
        ei = imp * ndtr(z) + sigma * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        # ties (e.g. all zero far from data) broken at random by the seed, then by predicted mean
        jitter = self.rng.random(len(untried)) * 1e-12
        return [int(untried[j]) for j in np.lexsort((mu, -(ei + jitter)))]
