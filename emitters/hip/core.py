"""The HIP backend's core type (``HipCore``) and the hooks its core files name: what each op's kernel
computes (``check_op``), its heuristic (``hero``), search space, schedule check and launch description
(``render``: a ``Launch``). The cores are the files of ``cores/``; ``build.py`` looks each step up there,
never branching on an op.

GEMM and conv2d (NHWC, groups 1) run on the MFMA GEMM body (gemm.py) in bf16, fp16 or fp32 with the fused
epilogue; softmax on softmax.py. The tiled heuristic fills the GPU's compute units with tiles before it makes
them large.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import UnsupportedError

from ..core import Core
from ..schedule import valid_space
from . import gemm as g

# LDS row pads whose fragment reads the CDNA bank model (emitters/hip/lds_banks.py) finds conflict-free on
# every heuristic tile: 4 for 16-bit rows (an LD of 4 mod 8 elements), 1 for fp32 (an odd LD)
HERO_PAD = {"bf16": 4, "fp16": 4, "fp32": 1}
PADS = {"bf16": (0, 4, 8, 12), "fp16": (0, 4, 8, 12), "fp32": (0, 1, 4, 5)}
TILES = ((128, 128, 2, 2), (64, 128, 1, 2), (128, 64, 2, 1), (64, 64, 1, 1), (32, 64, 1, 2), (32, 32, 1, 1))


@dataclass(frozen=True)
class Launch:
    """One kernel ready for any runner: its source for ``target`` ("amd" or "nvidia"), grid, block, and
    arguments in order: ("in", input name), ("out", None), ("null", None), ("i32", value), ("f32", value);
    ``dynamic_smem``: the bytes of dynamic shared memory a launch must give (the NVIDIA prelude's LDS)."""

    name: str
    source: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[tuple[str, Any], ...]
    dynamic_smem: int = 0


@dataclass(frozen=True, kw_only=True)
class HipCore(Core):
    """One op kind's HIP kernel (the shared ``Core``, emitters/core.py). ``check_op(op)`` raises
    ``UnsupportedError`` for a case the kernel does not compute, before any schedule exists; the shared
    hooks take: ``hero(op, compute_units)``, ``space(op, hero)``, ``check(op, variant, schedule, host)``
    (``BadInputError``), ``render(op, schedule, target) -> the Launch`` (source, grid, block, arguments).
    ``family``: the variant family (variants.py) whose variant for the op it is."""

    check_op: Callable[[Any], None]
    family: str


def operand(inputs_needed: tuple[str, ...], name: str) -> tuple[str, Any]:
    return ("in", name) if name in inputs_needed else ("null", None)


# ------------------------------------------------------------------------- GEMM and conv2d (MFMA body)

def mfma_dtype(op: Any) -> None:
    if op.dtype.value not in g.DTYPES:
        raise UnsupportedError(f"the HIP MFMA kernels compute {', '.join(g.DTYPES)}, not {op.dtype.value}")


def tiled_hero(m: int, n: int, dtype: str, cus: int) -> g.HipGemmSchedule:
    """The largest tile that still gives every compute unit a workgroup (else the one with the most
    workgroups); bk 32 for the small tiles, whose K loop is otherwise short of MFMAs."""
    best = None
    pad = HERO_PAD[dtype]
    for bm, bn, wm, wn in TILES:
        s = g.HipGemmSchedule(bm, bn, 16 if bm * bn >= 128 * 64 else 32, wm, wn, pad)
        tiles = -(-m // bm) * -(-n // bn)
        if tiles >= cus:
            return s
        best = best if best and best[0] >= tiles else (tiles, s)
    return best[1]  # type: ignore[index]


def tiled_space(op: Any, hero: g.HipGemmSchedule) -> list[g.HipGemmSchedule]:
    """Every MFMA schedule that builds for ``op``'s dtype, the heuristic's first: tiles of 32-256 over 1-8
    wavefronts, bk 8-64 and four LDS pads (``PADS``)."""
    tiles = (32, 64, 128, 256)
    grid = itertools.product(tiles, tiles, (1, 2, 4), (1, 2, 4), (8, 16, 32, 64), PADS[op.dtype.value])
    return valid_space(op, hero, (g.HipGemmSchedule(bm, bn, bk, wm, wn, pad) for bm, bn, wm, wn, bk, pad in grid))


def schedule_check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    """The schedule's own check for ``op`` (its dtype, for the MFMA body)."""
    schedule.validate(op, host)
