"""What every strategy shares: the candidates, hero-first start, and never re-proposing a candidate."""

from __future__ import annotations

from typing import Any

Observed = dict[int, "float | None"]


class Strategy:
    name = "base"

    def __init__(self, x: Any, seed: int, n_hero: int = 1) -> None:
        import numpy as np

        self.x = x
        self.n = len(x)
        self.n_hero = min(n_hero, self.n)
        self.rng = np.random.default_rng(seed)

    def order(self, observed: Observed) -> list[int]:
        """The candidates this strategy would take next, best first (heroes before anything else)."""
        raise NotImplementedError

    def propose(self, observed: Observed) -> int | None:
        heroes = [i for i in range(self.n_hero) if i not in observed]
        if heroes:
            return heroes[0]
        nxt = self.order(observed)
        return nxt[0] if nxt else None

    def upcoming(self, observed: Observed, current: int, count: int) -> list[int]:
        """Likely next proposals after ``current``, to compile ahead (a guess; may be empty)."""
        heroes = [i for i in range(self.n_hero) if i not in observed and i != current]
        return (heroes + [i for i in self.order(observed) if i != current and i not in heroes])[:count]
