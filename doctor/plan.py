"""The decision engine: which variant runs an operation on this host, and why every other one does not.

1. Hard requirements filter (backend present, ISA, compute capability, shared memory, toolchain,
   precision, and the op's own shape or layout where a variant's kernels cannot take it: ``Variant.refuses``);
   each rejection keeps its reasons.
2. A score orders what is left: the variant's priority (emitters rank their own families: tensor cores
   over CUDA cores, AVX-512 over AVX2 over portable C).
3. Precision falls back BF16 -> FP16 -> FP32 when no variant can compute the requested one here; the
   decision says so. 8-bit inputs (int8, FP8) do not fall back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import BadInputError, UnsupportedError
from .report import HostReport
from .variants import PRECISIONS, Variant

SCHEMA_VERSION = 1
# 8-bit inputs have no fallback: their scales and ranges are part of what was asked (a scaled GEMM)
FALLBACK = {"bf16": ["bf16", "fp16", "fp32"], "fp16": ["fp16", "fp32"], "fp32": ["fp32"], "int8": ["int8"],
            "fp8e4m3": ["fp8e4m3"], "fp8e5m2": ["fp8e5m2"]}


@dataclass(frozen=True)
class Candidate:
    variant: str
    backend: str
    family: str
    precision: str
    score: float
    accepted: bool
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Decision:
    op: dict[str, Any]
    requested_precision: str
    precision: str | None  # what will run (after fallback), None when nothing can
    fallback: str | None  # the sentence that explains a precision fallback
    chosen: str | None  # variant id
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)  # accepted first, by score

    @property
    def variant_id(self) -> str | None:  # the seeds' name for it
        return self.chosen

    @property
    def backend(self) -> str | None:
        c = next((c for c in self.candidates if c.variant == self.chosen), None)
        return c.backend if c else None

    def planned_op(self, op: Any) -> Any:
        """``op`` in the precision that will run: its own, or the fallback's (bf16 -> fp16 on a gfx908)."""
        if not self.precision or self.precision == op.dtype.value:
            return op
        import dataclasses

        return dataclasses.replace(op, dtype=type(op.dtype)(self.precision))

    @property
    def rejected(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if not c.accepted)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION, "op": self.op, "requested_precision": self.requested_precision,
            "precision": self.precision, "fallback": self.fallback, "chosen": self.chosen,
            "backend": self.backend, "candidates": [c.to_json() for c in self.candidates],
        }

    def require(self) -> str:
        """The chosen variant id, or UnsupportedError with every rejection reason."""
        if self.chosen is None:
            why = "; ".join(f"{c.variant}: {', '.join(c.reasons)}" for c in self.candidates) or "no variant is registered"
            raise UnsupportedError(f"no variant can run {self.op.get('op')} in {self.requested_precision} here ({why})",
                                   "`tracea doctor` shows what this machine has")
        return self.chosen


def plan(op: Any, host: HostReport, variants: Iterable[Variant], precision: str | None = None,
         backend: str | None = None, device: int | None = None) -> Decision:
    """Rank ``variants`` for ``op`` on ``host``. ``precision`` defaults to the op's dtype; ``backend``
    restricts the choice (a variant of another backend is rejected with that reason)."""
    requested = (precision or getattr(getattr(op, "dtype", None), "value", None) or "fp32").lower()
    if requested not in PRECISIONS:
        raise BadInputError(f"precision: unknown {requested!r}; use {', '.join(PRECISIONS)}")
    mine = [v for v in variants if v.op == op.kind]
    chain = FALLBACK[requested]

    chosen_precision = None
    for p in chain:
        if any(_fits(v, op, host, p, backend, device) for v in mine):
            chosen_precision = p
            break
    judged = chosen_precision or requested
    candidates = []
    for v in mine:
        reasons = list(v.unmet(host, judged, device))
        why = v.refuses(op) if v.refuses is not None else None
        if why:
            reasons.append(why)
        if backend and v.backend != backend:
            reasons.insert(0, f"backend {v.backend}, not the requested {backend}")
        candidates.append(Candidate(v.id, v.backend, v.family, judged, float(v.priority), not reasons, tuple(reasons)))
    candidates.sort(key=lambda c: (not c.accepted, -c.score, c.variant))
    chosen = candidates[0].variant if candidates and candidates[0].accepted else None

    fallback = None
    if chosen_precision and chosen_precision != requested:
        skipped = chain[: chain.index(chosen_precision)]
        why = {p: sorted({r for v in mine for r in v.unmet(host, p, device)}) for p in skipped}
        detail = "; ".join(f"{p}: {', '.join(w) or 'no variant'}" for p, w in why.items())
        fallback = f"{requested} is not available here ({detail}); falling back to {chosen_precision}"
    return Decision(op=op.to_json(), requested_precision=requested, precision=chosen_precision,
                    fallback=fallback, chosen=chosen, candidates=tuple(candidates))


def _fits(v: Variant, op: Any, host: HostReport, precision: str, backend: str | None, device: int | None) -> bool:
    """``v`` runs ``op`` at ``precision`` here (a kernel's refusal of the op's shape or layout included: the op's
    other fields do not change with its precision)."""
    return ((backend is None or v.backend == backend) and not v.unmet(host, precision, device)
            and not (v.refuses is not None and v.refuses(op)))
