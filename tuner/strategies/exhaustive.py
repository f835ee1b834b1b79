"""Every candidate in the space's order (hero first): the reference optimum of a space."""

from __future__ import annotations

from .common import Observed, Strategy


class Exhaustive(Strategy):
    name = "exhaustive"

    def order(self, observed: Observed) -> list[int]:
        return [i for i in range(self.n) if i not in observed]
