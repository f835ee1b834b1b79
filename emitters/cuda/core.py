"""The CUDA backend's core type and what several of its core files share: ``CudaCore`` (the shared
``Core`` of emitters/core.py with what CUDA adds), the tiled cores' check and the plain kernel object. The cores themselves are the files of ``cores/``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.doctor.variants import Variant

from ..core import Core
from .arch import Arch
from .render import Rendered
from .runtime import CudaKernel
from .schedule import CudaSchedule


@dataclass(frozen=True, kw_only=True)
class CudaCore(Core):
    """One kernel core of the CUDA backend and the ops it serves. ``name`` is its schedules' ``core`` (their
    JSON's "core"; ``ops`` the JSON's "kernel" where a name is shared). The shared hooks take:
    ``hero(op, host)``, ``space(op, hero, target: Arch)`` (candidates beside the hero), ``check(op, variant,
    schedule, target: Arch)``, ``render(op, schedule, arch) -> (Rendered, runtime scalars)``, ``kernel(op,
    artifact, rendered, scalars) -> the kernel object``.

    An op kind has several cores here, so each names the variant family whose main core it is; an alternate
    core (family "") names the families whose variants also run it beside their main core (``serves``:
    "family" or "family.op"), and the ops for which it is their hero (``prefers``).

    A main core's line also states its variants (variants.py makes one per op it computes): ``precisions``,
    ``smem`` (the opt-in shared memory per block its largest hero schedule takes; None: no opt-in),
    ``descriptions``, ``verified`` (its kernels ran and verified against the float64 references on a
    GPU: only then is the variant offered to the planner) and ``refuses`` (an op of its kinds whose shape or layout
    its kernels cannot take, with the reason: the planner then ranks the next variant)."""

    family: str  # the variant family (variants.py) whose kernels it renders; "": an alternate core
    serves: tuple[str, ...] = ()
    prefers: Callable[[Any], bool] | None = None
    applies: Callable[[Any], bool] | None = None  # where it may run and is searched (default: ``prefers``)
    precisions: tuple[str, ...] = ()
    smem: int | None = None
    verified: bool = False
    refuses: Callable[[Any], str | None] | None = None  # the variant's: an op its kernels cannot take, and why


def tiled_check(core: str) -> Callable[[Any, Variant, Any, Arch], None]:
    """The checks of a ``CudaSchedule`` core: its schedule type, precision, target, core and limits."""

    def check(op: Any, v: Variant, schedule: Any, arch: Arch) -> None:
        if not isinstance(schedule, CudaSchedule):
            raise BadInputError(f"schedule: expected a CudaSchedule, got {type(schedule).__name__}")
        if op.dtype.value not in v.precisions:
            raise UnsupportedError(f"{v.id} computes {', '.join(v.precisions)}, not {op.dtype.value}",
                                   "fp32 runs on cuda-simt, bf16/fp16 on cuda-mma-sync")
        if arch.cc < v.requirements.min_compute_capability:
            raise UnsupportedError(f"{v.id} needs sm_{''.join(map(str, v.requirements.min_compute_capability))} "
                                   f"or later, not {arch.name}")
        if getattr(op, "groups", 1) != 1:
            raise UnsupportedError("grouped convolution is not implemented on CUDA yet", "use --backend cpu")
        if schedule.core != core:
            raise BadInputError(f"core: {v.id} runs the {core} core, not {schedule.core}")
        schedule.validate(op, arch)

    return check


def cuda_kernel(op: Any, artifact: Any, rendered: Rendered, scalars: dict[str, Any]) -> Any:
    """The plain kernel object: buffers, one launch of the rendered grid, timing (runtime.py)."""
    return CudaKernel(op, artifact, rendered, scalars)
