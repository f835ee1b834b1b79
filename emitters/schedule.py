"""The schedule contract every backend's schedules follow, and the JSON reading they share.

A schedule says how one kernel is blocked, staged and launched, as a frozen value (a dataclass: hashable,
compared by its fields). Each backend keeps its own in its folder: ``cpu/schedule.py`` (``CpuSchedule``)
and ``cpu/attention.py``; ``cuda/schedule.py`` (``CudaSchedule``), ``cuda/gemv.py``, ``cuda/stem.py``,
``cuda/attention.py`` and ``cuda/hopper/``; ``hip/gemm.py`` and ``hip/softmax.py``. Every one of them is a
``Schedule`` (``tests/emitters/test_schedule_protocol.py`` finds them all and checks it, with a JSON round trip of
each one's hero).

This module imports neither NumPy nor the IR, so the planner and the CLI can read schedules cheaply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from tracea.doctor.errors import BadInputError

SCHEMA_VERSION = 1


@runtime_checkable
class Schedule(Protocol):
    """One kernel's schedule, as every backend writes it. The tuner, the database, replay and bundles hold
    schedules only through these members and the backend's ``schedule_from_json``."""

    @property
    def name(self) -> str:
        """A short readable label, unique within a space: the tuner's tables and logs, kernel names
        (``8x48_mc128_kc1024_nc4080_t2_u2_p0``, ``wgmma_64x64x64_s8_c1_rm8_ts``, ``mfma_32x32x32_w1x1_p1``)."""
        ...

    def validate(self, op: Any, target: Any, /) -> None:
        """Raise ``BadInputError`` (``UnsupportedError`` for what the kernels do not compute) naming the
        first field that cannot work for ``op`` on ``target``. The target is the backend's own: the host
        report on the CPU (a variant may follow: its instruction family, else the host's); an ``Arch`` on
        CUDA (the Hopper schedules take its opt-in shared memory in bytes); on HIP none enters (``op``'s
        dtype decides). Where a backend's schedule allows ``None`` for either, the fields alone are checked."""
        ...

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON object, what tuning databases, bundles and ``schedule.json`` files store.
        A field added later is left out while it holds its old behaviour's value, so that stored schedules
        read (and hash) as before."""
        ...

    @staticmethod
    def from_json(d: dict[str, Any]) -> Schedule:
        """The schedule ``to_json`` wrote, old documents included; ``BadInputError`` naming the first unknown,
        missing or ill-typed field, or a document of another backend or kind."""
        ...

    def features(self, op: Any) -> dict[str, float]:
        """Quantities the tuner's model sees for ``op`` beside the JSON's own fields (the backend's
        ``tuning_features``): warps and shared memory per block, the block tile and how many tiles cover
        the op. Empty where the fields are all the model needs."""
        ...


def positive_ints(schedule: Any, names: tuple[str, ...]) -> None:
    """``BadInputError`` naming the first of ``names`` that is not a positive integer (a bool is not one)."""
    for name in names:
        v = getattr(schedule, name)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise BadInputError(f"{name}: expected a positive integer, got {v!r}")


def booleans(schedule: Any, names: tuple[str, ...]) -> None:
    """``BadInputError`` naming the first of ``names`` that is not true or false."""
    for name in names:
        if not isinstance(getattr(schedule, name), bool):
            raise BadInputError(f"{name}: expected true or false, got {getattr(schedule, name)!r}")


def schedule_fields(d: dict[str, Any], cls: type, backend: str, label: str, required: tuple[str, ...],
                    version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The constructor arguments of ``cls`` from a schedule's JSON ``d`` (every backend's ``from_json``):
    the schema version and the backend checked, the first unknown or missing field named."""
    d = dict(d)
    if d.pop("schema_version", version) != version:
        raise BadInputError("schedule: unsupported schema_version")
    got = d.pop("backend", backend)
    if got != backend:
        raise BadInputError(f"schedule: backend {got!r} is not a {label} schedule")
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise BadInputError(f"schedule: unknown field {unknown[0]!r}")
    missing = [n for n in required if n not in d]
    if missing:
        raise BadInputError(f"schedule: missing field {missing[0]!r}")
    return d


def valid_space(op: Any, hero: Any, candidates: Iterable[Any]) -> list[Any]:
    """``hero`` first, then each of ``candidates`` (other than it) whose ``validate(op)`` passes: a tuner's space
    over a grid of fields (the HIP and Metal GEMMs')."""
    out = [hero]
    for s in candidates:
        try:
            s.validate(op)
        except BadInputError:
            continue
        if s != hero:
            out.append(s)
    return out
