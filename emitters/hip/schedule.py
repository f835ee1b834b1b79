"""The HIP schedules' JSON, read back: ``{"kind": ..., field: integer, ...}`` (``HipGemmSchedule``, kind
"hip-mfma", in ``gemm.py``; ``HipSoftmaxSchedule``, kind "hip-softmax", in ``softmax.py``). Each class's
``from_json`` reads its own kind; ``build.schedule_from_json`` picks the class by the document's kind."""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import BadInputError


def kind_fields(d: dict[str, Any], kind: str, cls: type) -> dict[str, int]:
    """The constructor arguments of ``cls`` from ``d``: a JSON object of ``kind`` whose other members are
    ``cls``'s fields, each an integer; ``BadInputError`` naming what is wrong otherwise."""
    if not isinstance(d, dict):
        raise BadInputError(f"a HIP schedule is a JSON object, not {type(d).__name__}")
    if d.get("kind") != kind:
        raise BadInputError(f"schedule kind {d.get('kind')!r} is not a {kind} schedule")
    fields = {k: v for k, v in d.items() if k != "kind"}
    allowed = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    if set(fields) - allowed or any(isinstance(v, bool) or not isinstance(v, int) for v in fields.values()):
        raise BadInputError(f"a {kind} schedule has integer fields {', '.join(sorted(allowed))}; got {fields}")
    return fields
