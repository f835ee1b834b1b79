"""Uniform random order over the candidates (after the heroes), fixed by the seed."""

from __future__ import annotations

from typing import Any

from .common import Observed, Strategy


class RandomSearch(Strategy):
    name = "random"

    def __init__(self, x: Any, seed: int, n_hero: int = 1) -> None:
        super().__init__(x, seed, n_hero)
        self.perm = [int(i) for i in self.rng.permutation(self.n)]

    def order(self, observed: Observed) -> list[int]:
        return [i for i in self.perm if i not in observed]
