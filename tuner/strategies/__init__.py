"""Search strategies: small modules over one shared cost function (the tuner's evaluator).

A strategy gets the encoded candidates (one row per schedule, hero configurations first), proposes the
index to evaluate next from what has been observed so far (index -> objective in ms, None for a failed
candidate), and never proposes an index twice. The search loop (tuner/search.py) owns budgets, time
limits, convergence and recording.
"""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import BadInputError

NAMES = ("bayes", "random", "exhaustive")


def make_strategy(name: str, x: Any, seed: int, n_hero: int = 1) -> Any:
    if name == "exhaustive":
        from .exhaustive import Exhaustive

        return Exhaustive(x, seed, n_hero)
    if name == "random":
        from .random import RandomSearch

        return RandomSearch(x, seed, n_hero)
    if name == "bayes":
        from .bayes import Bayes

        return Bayes(x, seed, n_hero)
    raise BadInputError(f"--strategy: unknown strategy {name!r}; known: {', '.join(NAMES)}")
