"""The HIP softmax's core: ``emitters/hip/softmax.py``, a wavefront a row."""

from __future__ import annotations

from typing import Any

from tracea.doctor.errors import UnsupportedError

from .. import softmax as sm
from ..core import HipCore, Launch, schedule_check

ORDER = 30  # the registry's order, and its variants'


def softmax_check(op: Any) -> None:
    if op.dtype.value not in sm.STORE:
        raise UnsupportedError(f"the HIP softmax computes fp32, bf16 or fp16, not {op.dtype.value}")


def softmax_hero(op: Any, cus: int) -> sm.HipSoftmaxSchedule:
    """A workgroup of 4 rows unless that leaves compute units idle."""
    return sm.HipSoftmaxSchedule(4 if op.rows >= 4 * cus else 1)


def softmax_space(op: Any, hero: sm.HipSoftmaxSchedule) -> list[sm.HipSoftmaxSchedule]:
    """1-8 rows a workgroup, the heuristic's first."""
    return [hero, *(sm.HipSoftmaxSchedule(r) for r in range(1, 9) if r != hero.rows_per_group)]


def softmax_launch(op: Any, schedule: Any, target: str) -> Launch:
    return Launch(sm.KERNEL, sm.render(op.dtype.value, schedule, target), sm.grid(op.rows, schedule),
                  (schedule.threads, 1, 1), (("in", "x"), ("out", None), ("i32", op.rows), ("i32", op.cols)))


CORES = (
    HipCore(name="softmax", ops=("softmax",), family="hip-simd", schedule=sm.HipSoftmaxSchedule,
            check_op=softmax_check, hero=softmax_hero, space=softmax_space, check=schedule_check,
            render=softmax_launch,
            descriptions={"softmax": "row softmax: a wavefront a row, online max and sum combined through LDS"}),
)
