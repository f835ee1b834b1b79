"""The HIP backend's kernel cores by op kind: what each op's kernel computes (``check_op``), its schedule
class, heuristic (``hero``), search space, schedule check and launch description (``render``) are looked up
here, never branched on in ``build.py``. Adding an op is its kernel module plus one ``HipCore(...)`` line in
``CORES``: the line's family and description are the op's variant too (``variants.py`` makes it).

GEMM and conv2d (NHWC, groups 1) run on the MFMA GEMM body (gemm.py) in bf16, fp16 or fp32 with the fused
epilogue; softmax on softmax.py. The tiled heuristic fills the GPU's compute units with tiles before it makes
them large.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import BadInputError, UnsupportedError

from ..core import Core
from . import gemm as g
from . import softmax as sm

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


def _operand(inputs_needed: tuple[str, ...], name: str) -> tuple[str, Any]:
    return ("in", name) if name in inputs_needed else ("null", None)


# ------------------------------------------------------------------------- GEMM and conv2d (MFMA body)

def _mfma_dtype(op: Any) -> None:
    if op.dtype.value not in g.DTYPES:
        raise UnsupportedError(f"the HIP MFMA kernels compute {', '.join(g.DTYPES)}, not {op.dtype.value}")


def _conv_check(op: Any) -> None:
    _mfma_dtype(op)
    if op.layout != "nhwc" or op.groups != 1:
        raise UnsupportedError("the HIP conv computes NHWC convolutions with groups 1",
                               "--layout nhwc; grouped convolutions run on another backend")


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
    out = [hero]
    tiles = (32, 64, 128, 256)
    for bm, bn, wm, wn, bk, pad in itertools.product(tiles, tiles, (1, 2, 4), (1, 2, 4), (8, 16, 32, 64),
                                                     PADS[op.dtype.value]):
        s = g.HipGemmSchedule(bm, bn, bk, wm, wn, pad)
        try:
            s.validate(op)
        except BadInputError:
            continue
        if s != hero:
            out.append(s)
    return out


def _check(op: Any, variant: Any, schedule: Any, host: Any) -> None:
    """The schedule's own check for ``op`` (its dtype, for the MFMA body)."""
    schedule.validate(op, host)


def _gemm_launch(op: Any, schedule: Any, target: str) -> Launch:
    dtype, needs = op.dtype.value, tuple(op.shapes())
    smem = schedule.lds_bytes(dtype) if target == "nvidia" else 0
    src = g.render(dtype, schedule, target, "gemm", op.epilogue, op.layout_a, op.layout_b)
    args = (("in", "a"), ("in", "b"), ("out", None), _operand(needs, "bias"), _operand(needs, "residual"),
            ("i32", op.m), ("i32", op.n), ("i32", op.k), ("f32", op.alpha))
    return Launch(g.KERNEL, src, g.grid(op.m, op.n, schedule), (schedule.threads, 1, 1), args, smem)


def _conv_launch(op: Any, schedule: Any, target: str) -> Launch:
    dtype, needs = op.dtype.value, tuple(op.shapes())
    smem = schedule.lds_bytes(dtype) if target == "nvidia" else 0
    src = g.render(dtype, schedule, target, "conv", ("bias",) if op.bias else ())
    ints = (op.n, op.h, op.w, op.c, op.p, op.q, op.k, op.r, op.s, *op.stride, *op.padding, *op.dilation)
    args = (("in", "x"), ("in", "weight"), ("out", None), _operand(needs, "bias"), *(("i32", v) for v in ints))
    return Launch(g.CONV_KERNEL, src, g.grid(op.gemm_m, op.gemm_n, schedule), (schedule.threads, 1, 1), args,
                  smem)


# ------------------------------------------------------------------------------------------- softmax

def _softmax_check(op: Any) -> None:
    if op.dtype.value not in sm.STORE:
        raise UnsupportedError(f"the HIP softmax computes fp32, bf16 or fp16, not {op.dtype.value}")


def _softmax_hero(op: Any, cus: int) -> sm.HipSoftmaxSchedule:
    """A workgroup of 4 rows unless that leaves compute units idle."""
    return sm.HipSoftmaxSchedule(4 if op.rows >= 4 * cus else 1)


def _softmax_space(op: Any, hero: sm.HipSoftmaxSchedule) -> list[sm.HipSoftmaxSchedule]:
    """1-8 rows a workgroup, the heuristic's first."""
    return [hero, *(sm.HipSoftmaxSchedule(r) for r in range(1, 9) if r != hero.rows_per_group)]


def _softmax_launch(op: Any, schedule: Any, target: str) -> Launch:
    return Launch(sm.KERNEL, sm.render(op.dtype.value, schedule, target), sm.grid(op.rows, schedule),
                  (schedule.threads, 1, 1), (("in", "x"), ("out", None), ("i32", op.rows), ("i32", op.cols)))


CORES: dict[str, HipCore] = {kind: core for core in (
    HipCore(name="gemm", ops=("gemm",), family="hip-mfma", schedule=g.HipGemmSchedule, check_op=_mfma_dtype,
            hero=lambda op, cus: tiled_hero(op.m, op.n, op.dtype.value, cus), space=tiled_space, check=_check,
            render=_gemm_launch, descriptions={
                "gemm": "Matrix Core GEMM: v_mfma_f32_32x32x8 (16-bit) or 32x32x2 (fp32) over 64-lane wavefronts, "
                        "double-buffered LDS, fp32 accumulation, fused epilogue"}),
    HipCore(name="conv2d", ops=("conv2d",), family="hip-mfma", schedule=g.HipGemmSchedule, check_op=_conv_check,
            hero=lambda op, cus: tiled_hero(op.gemm_m, op.gemm_n, op.dtype.value, cus), space=tiled_space,
            check=_check, render=_conv_launch,
            descriptions={"conv2d": "implicit-GEMM NHWC convolution on the Matrix Core GEMM's body"}),
    HipCore(name="softmax", ops=("softmax",), family="hip-simd", schedule=sm.HipSoftmaxSchedule,
            check_op=_softmax_check, hero=_softmax_hero, space=_softmax_space, check=_check, render=_softmax_launch,
            descriptions={"softmax": "row softmax: a wavefront a row, online max and sum combined through LDS"}),
) for kind in core.ops}


def core_for(op: Any) -> HipCore:
    """The core of ``op``'s kind, its ``check_op`` passed; UnsupportedError for a kind or case it does not take."""
    kind = getattr(op, "kind", None)
    core = CORES.get(kind)  # type: ignore[arg-type]
    if core is None:
        raise UnsupportedError(f"the HIP backend has no {kind} kernel")
    core.check_op(op)
    return core
