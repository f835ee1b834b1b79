"""The search space of one tuning run: the backend's valid candidates (hero first), changed by a
``--space`` TOML file, pruned by the bank-conflict simulator where the backend describes its shared-memory
tiles, and encoded as numbers for the Bayesian strategy.

``--space`` file::

    [restrict]          # keep only candidates whose field takes one of these values
    kc = [128, 256]
    threads = [2]

    [extend]            # add values: each kept candidate again with the field set to each new value
    kc = [768]          # (new candidates are validated like the backend's own)
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

SECTIONS = ("restrict", "extend")
MAX_EXTENDED = 20_000  # candidates an [extend] may make, all validated: bounded, so a typo cannot run for hours


def read_space_file(path: str | Path) -> dict[str, dict[str, list[Any]]]:
    """The ``[restrict]`` and ``[extend]`` tables of a TOML space file, checked."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef]
        except ImportError:
            raise BadInputError("--space needs Python 3.11 (tomllib) or the tomli package",
                                "`pip install tomli`, or run Tracea on Python 3.11+") from None
    from tracea.doctor.inputs import read_text

    p = Path(path)
    try:
        doc = tomllib.loads(read_text(p, "--space", limit=1 << 20))
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"{p} is not valid TOML: {exc}") from None
    unknown = sorted(set(doc) - set(SECTIONS))
    if unknown:
        raise BadInputError(f"{p}: unknown table [{unknown[0]}] (expected [restrict] and/or [extend])")
    out: dict[str, dict[str, list[Any]]] = {}
    for section in SECTIONS:
        table = doc.get(section, {})
        if not isinstance(table, dict):
            raise BadInputError(f"{p}: [{section}] must be a table")
        for name, values in table.items():
            if not isinstance(values, list) or not values:
                raise BadInputError(f"{p}: {section}.{name} must be a non-empty list of values")
        out[section] = dict(table)
    return out


def _validator(module: Any, op: Any, variant: Any, host: Any):
    custom = getattr(module, "validate_schedule", None)

    def check(s: Any) -> bool:
        try:
            if custom is not None:
                custom(op, variant, s, host)
            else:
                s.validate(op, host, variant)
        except (BadInputError, UnsupportedError):
            return False
        return True

    return check


def apply_space_file(cands: list[Any], spec: dict[str, dict[str, list[Any]]], check) -> list[Any]:
    """Extend, then restrict ``cands`` (keeping their order, duplicates dropped). A space may mix schedule
    types (the small-M GEMM's beside the tiled cores'): a field names any candidate's field, ``extend``
    varies the candidates that have it, ``restrict`` keeps those whose value is listed."""
    if not cands:
        return cands
    own = {type(c): {f.name for f in dataclasses.fields(c)} for c in cands}
    fields = set().union(*own.values())
    for section in SECTIONS:
        for name in spec.get(section, {}):
            if name not in fields:
                raise BadInputError(f"--space: {section}.{name} is not a schedule field; fields: {', '.join(sorted(fields))}")
    out = list(cands)
    for name, values in spec.get("extend", {}).items():
        values = list(dict.fromkeys(values))  # a value listed twice is one candidate
        if len(out) * len(values) > MAX_EXTENDED:
            raise BadInputError(f"--space: extend.{name} would make {len(out) * len(values)} candidates to check "
                                f"(at most {MAX_EXTENDED}: each is validated, which takes up to tens of milliseconds)",
                                "restrict the space first, or extend fewer fields or values")
        extra = []
        for s in out:
            if name not in own.get(type(s), ()):
                continue
            for v in values:
                try:
                    extra.append(dataclasses.replace(s, **{name: v}))
                except (TypeError, ValueError) as exc:
                    raise BadInputError(f"--space: extend.{name} = {v!r}: {exc}") from None
        out += [s for s in extra if check(s)]
    for name, values in spec.get("restrict", {}).items():
        out = [s for s in out if name in own.get(type(s), ()) and getattr(s, name) in values]
    seen: set[Any] = set()
    unique = []
    for s in out:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    if not unique:
        raise BadInputError("--space: no valid candidate is left after the restrictions")
    return unique


def prune_bank_conflicts(cands: list[Any], module: Any, op: Any, variant: Any) -> tuple[list[Any], list[str]]:
    """Drop candidates whose shared-memory tiles conflict when a conflict-free swizzle of the same tile
    exists, as the bank simulator scores the accesses the kernel issues. Applies where the backend has
    ``bank_conflict_drop(op, variant, schedule) -> reason | None`` (CUDA's mma core); others pass.
    The hero is always kept. Returns the kept candidates and one line per dropped one."""
    drop = getattr(module, "bank_conflict_drop", None)
    if drop is None:
        return cands, []
    kept, dropped = [], []
    for i, s in enumerate(cands):
        reason = None if i == 0 else drop(op, variant, s)
        if reason is None:
            kept.append(s)
        else:
            dropped.append(f"{s.name}: {reason}")
    return kept, dropped


def build_space(op: Any, variant: Any, host: Any, module: Any, space_file: str | Path | None = None,
                pruned: list[str] | None = None) -> list[Any]:
    """The candidates of one run, hero first; ``pruned`` (when given) receives a line per candidate the
    bank-conflict rule dropped."""
    cands = list(module.search_space(op, variant, host))
    if space_file is not None:
        cands = apply_space_file(cands, read_space_file(space_file), _validator(module, op, variant, host))
    kept, dropped = prune_bank_conflicts(cands, module, op, variant)
    if pruned is not None:
        pruned.extend(dropped)
    return kept


def encode(schedules: list[dict[str, Any]], features: Any = None):
    """Numbers for the Gaussian process: log2 of sizes (blocking effects scale with ratios), booleans 0/1,
    strings one-hot; each column scaled to [0, 1]; constant columns dropped. ``features(schedule) ->
    {name: number}`` (the backend's ``tuning_features``) adds derived columns, encoded the same way."""
    import numpy as np

    if not schedules:
        return np.zeros((0, 0))
    if features is not None:
        schedules = [dict(s) | {f"~{k}": v for k, v in features(s).items()} for s in schedules]
    keys = sorted({k for s in schedules for k in s if k not in ("schema_version", "backend")})
    cols: list[list[float]] = []
    for k in keys:
        values = [s.get(k) for s in schedules]
        if all(isinstance(v, bool) for v in values):
            cols.append([float(v) for v in values])
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            cols.append([math.log2(v + 1) if v >= 0 else -math.log2(1 - v) for v in values])
        else:
            for level in sorted({json_text(v) for v in values}):
                cols.append([1.0 if json_text(v) == level else 0.0 for v in values])
    x = np.array(cols, dtype=float).T
    lo, hi = x.min(axis=0), x.max(axis=0)
    keep = hi > lo
    return (x[:, keep] - lo[keep]) / (hi[keep] - lo[keep])


def json_text(v: Any) -> str:
    import json

    return json.dumps(v, sort_keys=True)
