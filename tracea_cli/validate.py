"""The domains of Tracea's numeric and file options, written once and shared by every verb.

An option declares its domain where it is defined (``checked(COUNT, "--repeat", help=...)`` or
``op_options.option(..., domain=COUNT)``): the help text says the domain, and Click checks it while it
parses, so every command rejects ``--repeat 0`` or ``--n -3`` the same way (exit 2, one line naming the
flag) before any work starts. Only Typer and the standard library are imported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

SEED_MAX = 2**32 - 1  # numpy's and scikit-learn's RandomState take seeds below 2**32
MAX_RUNS = 1_000_000  # timed or warm-up runs of one kernel: more is a typo, and would run for hours
MAX_COUNT = 1_000_000_000  # a budget, a patience, a worker count: more is a typo (and past 2**63, SQLite's limit)
# The option naming what a command writes (a file: pack-repro, cache export; a folder: emit, export), spelt
# the same on every command; --out is the older spelling, kept.
OUTPUT = ("-o", "--output", "--out")


@dataclass(frozen=True)
class Domain:
    """The values an option accepts: ``text`` for the help and the error, ``ok`` to test one value.
    ``None`` (an optional flag left out) is always accepted: its meaning is the flag's default."""

    text: str
    ok: Callable[[Any], bool]

    def help(self, text: str) -> str:
        return f"{text.rstrip('.')}; {self.text}."

    def callback(self, ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if value is None or ctx.resilient_parsing:  # resilient: Tab-completion must never fail
            return value
        for one in value if isinstance(value, (list, tuple)) else (value,):
            problem = self.problem(one)
            if problem:
                raise typer.BadParameter(problem)
        return value

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` (one line), or None."""
        return None if self.ok(value) else f"expected {self.text}, got {_show(value)}"


class _ExistingFile(Domain):
    def problem(self, value: Any) -> str | None:
        path = Path(value)
        if path.is_file():
            return None
        if path.is_dir():
            return f"{value} is a folder, not a file"
        return f"{value} is not a regular file" if path.exists() else f"no such file {value}"


def _show(value: Any) -> str:
    return str(value) if isinstance(value, (int, float)) else repr(str(value))


def _int(low: int, high: int | None = None) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and v >= low and (high is None or v <= high)


SIZE = Domain("a positive integer", _int(1))
COUNT = Domain(f"an integer from 1 to {MAX_COUNT}", _int(1, MAX_COUNT))
NON_NEGATIVE = Domain(f"an integer from 0 to {MAX_COUNT}", _int(0, MAX_COUNT))
REPEATS = Domain(f"an integer from 1 to {MAX_RUNS}", _int(1, MAX_RUNS))
WARMUP = Domain(f"an integer from 0 to {MAX_RUNS}", _int(0, MAX_RUNS))
SEED = Domain(f"an integer from 0 to {SEED_MAX}", _int(0, SEED_MAX))
SECONDS = Domain("a finite number of seconds > 0", lambda v: math.isfinite(v) and v > 0)
FINITE = Domain("a finite number", lambda v: math.isfinite(v))
FILE = _ExistingFile("an existing file", lambda v: Path(v).is_file())


def checked(domain: Domain, *flags: str, help: str, **kwargs: Any) -> Any:
    """``typer.Option`` for a flag with a domain (for commands that write their options inline)."""
    return typer.Option(*flags, help=domain.help(help), callback=domain.callback, **kwargs)



def check_variant(variant_id: str, op_kind: str, backend: str) -> None:
    """``--variant``: a registered variant of this op and backend; otherwise say whose it is and list
    the variants that fit (the registry is imported only when the flag is given)."""
    from tracea.doctor.errors import BadInputError
    from tracea.emitters import registry

    if backend not in registry.BACKENDS:
        return  # the unknown backend is the error to report; the tuner says it
    every = registry.all_variants()
    fitting = [v.id for v in every if v.op == op_kind and v.backend == backend]
    found = next((v for v in every if v.id == variant_id), None)
    if found is not None and found.op == op_kind and found.backend == backend:
        return
    if found is None:
        what = f"--variant {variant_id}: no such variant"
    elif found.backend != backend:
        what = f"--variant {variant_id} is a {found.backend} variant of {found.op}, and this is --backend {backend}"
    else:
        what = f"--variant {variant_id} computes {found.op}, not {op_kind}"
    raise BadInputError(what, f"the {backend} {op_kind} variants: {', '.join(fitting) or 'none'}")
