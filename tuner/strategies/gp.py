"""A small Gaussian process for the Bayesian strategy, in NumPy: Matern 3/2 with one length scale per
encoded column, a signal variance and a noise variance, fitted to the posterior mode (marginal likelihood
times log-normal priors) with its analytic gradient (L-BFGS-B), warm-started from the previous fit.

Why not scikit-learn's: the tuner refits after every evaluation, and scikit-learn's general kernel
machinery with numerical restarts cost about 0.2 s a fit (seconds a run, minutes for a benchmark over
seeds); the same model here costs a few milliseconds, so the strategy can afford restarts and the
benchmarks many seeds.
"""

from __future__ import annotations

import math
from typing import Any

SQRT3 = math.sqrt(3.0)
# log-normal priors (mean and standard deviation of the log): length scales around the encoded range of
# a column (1.0), within a factor e either way at one sigma; the noise variance of the standardised
# log-times around 1e-3 (a 1 % timing spread over a 30 % spread of the space), loosely
LENGTH_PRIOR = (0.0, 1.0)
NOISE_PRIOR = (math.log(1e-3), 2.0)
LOG_LENGTH = (math.log(0.05), math.log(20.0))
LOG_SIGNAL = (math.log(1e-2), math.log(1e2))
LOG_NOISE = (math.log(1e-6), math.log(1.0))  # of the standardised targets


def _kernel(xa: Any, xb: Any, length: Any, signal: float) -> tuple[Any, Any, Any]:
    """k(xa, xb), the exponential factor and the per-column scaled squared differences (for gradients)."""
    import numpy as np

    diff2 = ((xa[:, None, :] - xb[None, :, :]) / length) ** 2
    r = np.sqrt(np.maximum(diff2.sum(axis=2), 0.0))
    e = np.exp(-SQRT3 * r)
    return signal * (1.0 + SQRT3 * r) * e, e, diff2


class GP:
    """Fit on (x, y) with y standardised inside; ``predict`` gives mean and standard deviation in y's units."""

    def __init__(self, dims: int) -> None:
        import numpy as np

        self.theta = np.concatenate([np.full(dims, math.log(0.5)), [0.0, math.log(1e-2)]])
        self.bounds = [LOG_LENGTH] * dims + [LOG_SIGNAL, LOG_NOISE]

    def _nll(self, theta: Any, x: Any, y: Any) -> tuple[float, Any]:
        import numpy as np

        d = x.shape[1]
        length, signal, noise = np.exp(theta[:d]), math.exp(theta[d]), math.exp(theta[d + 1])
        k, e, diff2 = _kernel(x, x, length, signal)
        kn = k + (noise + 1e-8) * np.eye(len(x))
        try:
            chol = np.linalg.cholesky(kn)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(theta)
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
        nll = 0.5 * float(y @ alpha) + float(np.log(np.diag(chol)).sum()) + 0.5 * len(x) * math.log(2 * math.pi)
        inv = np.linalg.solve(chol.T, np.linalg.solve(chol, np.eye(len(x))))
        w = np.outer(alpha, alpha) - inv  # d(-nll)/dK, times 2
        grad = np.empty_like(theta)
        dk_dlen = 3.0 * signal * e[:, :, None] * diff2  # dK / dlog(length_j)
        grad[:d] = -0.5 * np.einsum("ij,ijk->k", w, dk_dlen)
        grad[d] = -0.5 * float((w * k).sum())
        grad[d + 1] = -0.5 * noise * float(np.trace(w))
        (ml, sl), (mn, sn) = LENGTH_PRIOR, NOISE_PRIOR  # minus the log priors (MAP, not maximum likelihood)
        nll += float(((theta[:d] - ml) ** 2).sum()) / (2 * sl**2) + (theta[d + 1] - mn) ** 2 / (2 * sn**2)
        grad[:d] += (theta[:d] - ml) / sl**2
        grad[d + 1] += (theta[d + 1] - mn) / sn**2
        return nll, grad

    def fit(self, x: Any, y: Any, rng: Any, restarts: int = 0, optimise: bool = True) -> GP:
        """Condition on (x, y); with ``optimise``, first fit the hyperparameters (from the previous ones
        and ``restarts`` random starts), else keep them."""
        import numpy as np
        from scipy.optimize import minimize

        self.x = x
        self.mean, self.scale = float(y.mean()), float(y.std()) or 1.0
        ys = (y - self.mean) / self.scale
        if optimise:
            lo, hi = np.array(self.bounds).T
            starts = [np.clip(self.theta, lo, hi)] + [rng.uniform(lo, hi) for _ in range(restarts)]
            best = None
            for t0 in starts:
                res = minimize(self._nll, t0, args=(x, ys), jac=True, method="L-BFGS-B", bounds=self.bounds,
                               options={"maxiter": 100})
                if best is None or res.fun < best.fun:
                    best = res
            self.theta = best.x
        d = x.shape[1]
        self.length, self.signal = np.exp(self.theta[:d]), math.exp(self.theta[d])
        self.noise = math.exp(self.theta[d + 1]) + 1e-8
        k = _kernel(x, x, self.length, self.signal)[0] + self.noise * np.eye(len(x))
        self.chol = np.linalg.cholesky(k)
        self.alpha = np.linalg.solve(self.chol.T, np.linalg.solve(self.chol, ys))
        return self

    def predict(self, xq: Any, cov: bool = False) -> tuple[Any, Any]:
        """Posterior mean and standard deviation of the latent function (noise excluded), or the full
        covariance with ``cov``."""
        import numpy as np

        ks = _kernel(xq, self.x, self.length, self.signal)[0]
        mu = ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)
        if cov:
            c = _kernel(xq, xq, self.length, self.signal)[0] - v.T @ v
            return mu * self.scale + self.mean, c * self.scale**2
        var = np.maximum(self.signal - (v * v).sum(axis=0), 1e-12)
        return mu * self.scale + self.mean, np.sqrt(var) * self.scale
