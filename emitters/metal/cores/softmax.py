"""The Metal softmax's core: ``emitters/metal/softmax.py``, a simdgroup a row for short rows and several
simdgroups a row for long ones."""

from __future__ import annotations

from typing import Any

from .. import softmax as sm
from ..core import Launch, MetalCore

ORDER = 30  # the registry's order, and its variants'

SHORT_ROW = 2048  # up to this many columns a row takes one simdgroup (64 columns a lane)
ROW_SIMDGROUPS = (1, 2, 4, 8, 16, 32)
GROUP_ROWS = (1, 2, 4, 8)


def softmax_hero(op: Any, gpu_cores: int) -> sm.MetalSoftmaxSchedule:
    """Short rows: a simdgroup each, 4 a threadgroup unless that leaves GPU cores without one. Long rows: one
    a threadgroup, over enough simdgroups that a lane walks about 64 columns (at most 16 simdgroups)."""
    if op.cols <= SHORT_ROW:
        return sm.MetalSoftmaxSchedule(rows=4 if op.rows >= 4 * max(1, gpu_cores) else 1, simdgroups=1)
    g = 1
    while g < 16 and op.cols > 64 * 32 * g:
        g *= 2
    return sm.MetalSoftmaxSchedule(rows=1, simdgroups=g)


def softmax_space(op: Any, hero: sm.MetalSoftmaxSchedule) -> list[sm.MetalSoftmaxSchedule]:
    """1-8 rows a threadgroup by 1-32 simdgroups a row, up to 1024 threads; the heuristic's first."""
    out = [hero]
    for g in ROW_SIMDGROUPS:
        for r in GROUP_ROWS:
            s = sm.MetalSoftmaxSchedule(rows=r, simdgroups=g)
            if s.threads <= 1024 and s != hero:
                out.append(s)
    return out


def softmax_check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    schedule.validate(op, host)


def softmax_launch(op: Any, schedule: sm.MetalSoftmaxSchedule) -> Launch:
    return Launch(sm.KERNEL, sm.render(op.dtype.value, schedule), sm.grid(op.rows, schedule), (schedule.threads, 1, 1),
                  (("in", "x"), ("out", None), ("i32", op.rows), ("i32", op.cols)), schedule.threadgroup_bytes)


CORES = (
    MetalCore(name="softmax", ops=("softmax",), family="metal-simd", schedule=sm.MetalSoftmaxSchedule,
              check_op=sm.check_softmax, hero=softmax_hero, space=softmax_space, check=softmax_check,
              render=softmax_launch,
              descriptions={"softmax": "row softmax: a simdgroup a row (several simdgroups for long rows), online "
                                       "max and sum by simd_max/simd_sum and threadgroup memory"}),
)
