"""Which swizzles make a tile's shared-memory accesses conflict-free: the tuner's pruning rule ("drop a
schedule whose main loop conflicts when a conflict-free swizzle of the same tile exists") and the
emitter's choice of swizzle, both scored by the bank simulator on the tile sweeps the kernel issues.
``model="cdna"`` scores the same sweeps as AMD CDNA wavefronts (ds_read/ds_write; emitters/bank_cdna.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tracea.doctor.errors import BadInputError

from .bank_access import AccessBatch, parse_access, tile_sweep
from .bank_sim import simulate
from .layout import AnySwizzle, NoSwizzle, Swizzle, TileLayout, TmaSwizzle, XorSwizzle


def default_candidates() -> list[AnySwizzle]:
    """None, the seeds' Xor2/4/8, the TMA modes, and every CUTLASS Swizzle<B,M,S> whose XORed bits lie in
    the 128-byte bank window (M >= 2, M + B <= 7) with S in [max(B, 3), 7]."""
    out: list[AnySwizzle] = [NoSwizzle(), XorSwizzle(2), XorSwizzle(4), XorSwizzle(8),
                             TmaSwizzle("32B"), TmaSwizzle("64B"), TmaSwizzle("128B")]
    out += [Swizzle(b, m, s) for m in (2, 3, 4) for b in range(1, 8 - m) for s in range(max(b, 3), 8)]
    return out


@dataclass(frozen=True)
class SwizzleScore:
    layout: TileLayout
    totals: dict[str, Any]

    @property
    def conflict_free(self) -> bool:
        return self.totals["conflicts"] == 0

    def to_json(self) -> dict[str, Any]:
        return {"swizzle": self.layout.swizzle.to_json(), "name": self.layout.swizzle.name, **self.totals}


def score(layout: TileLayout, accesses: Sequence[str], model: str = "nvidia") -> dict[str, Any]:
    """Totals over one sweep of the tile by each access spec (``ldmatrix.x4``, ``cp.async.128.row``...)."""
    if not accesses:
        raise BadInputError("score needs at least one access spec")
    return simulate(AccessBatch.concat(tile_sweep(layout, spec, model) for spec in accesses)).totals()


def rank_swizzles(layout: TileLayout, accesses: Sequence[str],
                  candidates: Sequence[AnySwizzle] | None = None, model: str = "nvidia") -> list[SwizzleScore]:
    """Every candidate swizzle that fits the tile and the accesses, fewest conflict wavefronts first
    (ties keep the candidates' order, simplest first). Layout padding is kept as given."""
    for spec in accesses:
        parse_access(spec, model)  # a spec the model lacks is the caller's error, not a misfit swizzle
    ranked = []
    for sw in candidates if candidates is not None else default_candidates():
        try:
            lay = replace(layout, swizzle=sw, base_bytes=0)
            ranked.append(SwizzleScore(lay, score(lay, accesses, model)))
        except BadInputError:
            continue  # this swizzle does not fit the tile, or splits one of its vector accesses
    return sorted(ranked, key=lambda s: s.totals["conflicts"])


def should_drop(layout: TileLayout, accesses: Sequence[str],
                candidates: Sequence[AnySwizzle] | None = None, model: str = "nvidia") -> bool:
    """True when the layout's accesses conflict but some swizzle of the same tile does not."""
    if score(layout, accesses, model)["conflicts"] == 0:
        return False
    return any(s.conflict_free for s in rank_swizzles(layout, accesses, candidates, model))


# ------------------------------------------------------------------ padded rows (the HIP and Metal GEMMs' pads)

def conflict_free_pads(schedule: Any, pads: Iterable[int], conflicts: Callable[[Any], int]) -> list[int]:
    """The ``pads`` with which ``schedule`` (a dataclass with a ``pad`` field) makes ``conflicts`` 0; a pad whose
    schedule ``conflicts`` refuses (``BadInputError``: one the schedule does not build) is passed over."""
    out = []
    for pad in pads:
        try:
            if conflicts(replace(schedule, pad=pad)) == 0:
                out.append(pad)
        except BadInputError:
            continue
    return out


def pad_drop(op: Any, schedule: Any, pads: Iterable[int], conflicts: Callable[[Any], int], what: str) -> str | None:
    """The tuner's pruning rule for padded rows (tuner/space.py's ``bank_conflict_drop`` hook): why ``schedule``
    is dropped, when ``conflicts`` (cycles lost a k tile in ``what``) is not 0 for it and is 0 for another of
    ``pads`` whose schedule validates for ``op``; None to keep it."""
    mine = conflicts(schedule)
    if mine == 0:
        return None
    for pad in pads:
        other = replace(schedule, pad=pad)
        try:
            other.validate(op)
        except BadInputError:
            continue
        if conflicts(other) == 0:
            return f"pad {schedule.pad}: {mine} conflict cycles per k tile in {what}; pad {pad} has none"
    return None
