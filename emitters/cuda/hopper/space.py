"""The Hopper kernels' search spaces: what the tuner tries beside the heroes of ``schedule.py``.

The GEMM's grid over tile, stages, consumers, ping-pong, raster, cluster and store, with split-K variants
for shapes whose tiles can leave SMs idle, 2-block clusters along N and swapped operands for few rows; the conv's grid over the same
fields and its publish modes, on the gather, im2col and (for a conv that is a plain GEMM) gemm paths.
``keep_valid`` keeps the candidates that validate for the op, in order, hero first.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from typing import Any

from tracea.doctor.errors import BadInputError

from .conv_heroes import FITTED_FILTERS, SWAP_ROWS, conv_hero_schedule
from .conv_paths import gemm_view, gemm_view_unsupported
from .conv_schedule import PUBLISH, WgmmaConvSchedule, channels_padded
from .gemm_heroes import ONE_WAVE_FORMS, gemm_hero_schedule
from .schedule import RASTERS, SMEM_OPTIN_SM90, STORES, WgmmaSchedule, tile_count

SPLITS = (0, 2, 4, 8)  # split-K values searched besides 1, where a shape's tiles can leave SMs idle
SPREAD_SPLITS = (0, 8)  # and with the spread fix-up (more slices: its sum is shared among them)


def search_space(op: Any = None, smem_optin: int = SMEM_OPTIN_SM90, sm_count: int = 132) -> list[WgmmaSchedule]:
    """Every valid schedule over a grid of the searchable fields (hero first); split-K on a smaller grid
    (4 or 6 stages, raster m, no cluster) for shapes whose tiles can leave SMs idle; then clusters along N
    and swapped operands (``swap_candidates``); the one-wave forms of ``gemm_heroes`` (deeper rings than the grid's)
    come after the grid, before the split candidates."""
    out = [gemm_hero_schedule(op, sm_count)]
    shapes = ((64, 1, False), (128, 1, False), (128, 2, False), (192, 3, False), (256, 2, False),
              (64, 2, True), (128, 2, True))
    grid = itertools.product(shapes, (64, 128, 192, 256), (3, 4, 5, 6, 8), RASTERS, (1, 2), STORES)
    out = keep_valid(out, (WgmmaSchedule(bm=bm, bn=bn, stages=st, consumers=c, raster=ra, pingpong=pp, cluster=cl,
                                         store=so) for (bm, c, pp), bn, st, ra, cl, so in grid), op, smem_optin)
    out = keep_valid(out, ONE_WAVE_FORMS, op, smem_optin)
    out = keep_valid(out, split_candidates(out, op, sm_count), op, smem_optin)
    out = keep_valid(out, cluster_n_candidates(op, sm_count), op, smem_optin)
    return keep_valid(out, swap_candidates(op), op, smem_optin)


def swap_candidates(op: Any) -> Iterable[WgmmaSchedule]:
    """Swapped operands (``swap``: C^T's tiles, ``bn`` of C's rows each) for a GEMM of both operands K-major and
    at most ``SWAP_ROWS`` rows: 8-64 rows a tile, one or two consumers, 4-8 stages, both stores, with and
    without split-K."""
    if op is not None and ((op.layout_a, op.layout_b) != ("row", "col") or op.m > SWAP_ROWS):
        return
    for (bm, c), bn, st, so, sp in itertools.product(((64, 1), (128, 2)), (8, 16, 32, 64), (4, 6, 8), STORES, (1, 0)):
        yield WgmmaSchedule(bm=bm, bn=bn, stages=st, consumers=c, store=so, split=sp, swap=True)


# Pairs along N sharing A (cuBLAS's 128 x 64 1x2-cluster split-K kernel on 512 x 512 x 16384), TMA store
CLUSTER_N_TILES = ((128, 64, 8, 2), (64, 128, 8, 1), (128, 128, 6, 2))  # (bm, bn, stages, consumers)


def cluster_n_candidates(op: Any, sm_count: int) -> Iterable[WgmmaSchedule]:
    """2-block clusters along N (``cluster_axis`` "n") over ``CLUSTER_N_TILES``, rasters m and n, without
    split-K and, for shapes whose tiles can leave SMs idle (as ``split_candidates``), with split 0 and 4."""
    m, n = (op.m, op.n) if getattr(op, "kind", None) == "gemm" else (0, 0)
    for (bm, bn, st, c), ra in itertools.product(CLUSTER_N_TILES, RASTERS):
        s = WgmmaSchedule(bm=bm, bn=bn, stages=st, consumers=c, raster=ra, cluster=2, cluster_axis="n", store="tma")
        yield s
        if op is None or tile_count(s, m, n) < 2 * sm_count:
            yield from (dataclasses.replace(s, split=k) for k in (0, 4))


def split_candidates(space: list[Any], op: Any, sm_count: int) -> Iterable[Any]:
    """Split-K variants of ``space``'s schedules with 4 or 6 stages, raster m, no cluster, TMA store: every
    ``SPLITS`` value (each also with evict-first operand loads), the tail-only split and the spread fix-up
    at ``SPREAD_SPLITS``; none for shapes that fill the SMs twice over anyway."""
    m, n = (op.m, op.n) if getattr(op, "kind", None) == "gemm" else (op.gemm_m, op.k) if op is not None else (0, 0)
    for s in list(space):
        if s.split != 1 or s.stages not in (4, 6) or s.raster != "m" or s.cluster != 1 or s.store != "tma":
            continue
        if op is not None and tile_count(s, m, n) >= 2 * sm_count:
            continue
        if s.l2_hint == "first":  # evict-first forms split at most 5 stages deep (``streamed``: deeper was bimodal)
            s = dataclasses.replace(s, stages=min(s.stages, 5))
        for k in SPLITS:
            yield dataclasses.replace(s, split=k)
            yield dataclasses.replace(s, split=k, stages=min(s.stages, 5), l2_hint="first")
        yield dataclasses.replace(s, split=0, split_tail=True)
        if s.persistent:
            for k in SPREAD_SPLITS:
                yield dataclasses.replace(s, split=k, split_fix="spread")


def keep_valid(out: list, candidates: Iterable[Any], op: Any, smem_optin: int) -> list:
    """``out`` extended by the ``candidates`` that validate for ``op`` and are not in it yet, in order."""
    for s in candidates:
        try:
            s.validate(op, smem_optin)
        except BadInputError:
            continue
        if s not in out:
            out.append(s)
    return out


def conv_search_space(op: Any = None, smem_optin: int = SMEM_OPTIN_SM90,
                      sm_count: int = 132) -> list[WgmmaConvSchedule]:
    """Every valid schedule over tile, stages, consumers, ping-pong, raster and store (hero first); for a
    conv that is a plain GEMM, the GEMM's whole space on the "gemm" path first, then the gather's, the
    im2col path's (4, 6 or 8 stages), and split-K variants of both."""
    shapes = ((64, 1, False), (128, 1, False), (128, 2, False), (256, 2, False), (128, 2, True))
    grid = itertools.product(shapes, (64, 128, 192, 256), (3, 4, 5, 6, 8), ("m", "n"), STORES, PUBLISH)
    candidates = (WgmmaConvSchedule(bm=bm, bn=bn, stages=st, consumers=c, raster=ra, pingpong=pp, store=so, publish=pu)
                  for (bm, c, pp), bn, st, ra, so, pu in grid)
    out = [conv_hero_schedule(op, sm_count)]
    if op is not None and gemm_view_unsupported(op) is None:
        gemm_space = search_space(gemm_view(op), smem_optin, sm_count)
        out = keep_valid(out, (WgmmaConvSchedule.of_gemm(s) for s in gemm_space), op, smem_optin)
    out = keep_valid(out, candidates, op, smem_optin)
    tma_a = [dataclasses.replace(s, path="im2col") for s in out if s.path == "gather" and s.publish == "wait"
             and s.stages in (4, 6, 8)]
    out = keep_valid(out, tma_a, op, smem_optin)
    out = keep_valid(out, fitted_candidates(out, op), op, smem_optin)
    gathered = [s for s in out if s.path in ("gather", "im2col")]
    return keep_valid(out, split_candidates(gathered, op, sm_count), op, smem_optin)


def fitted_candidates(space: list[Any], op: Any) -> Iterable[Any]:
    """For filters off multiples of 64 (``conv_heroes.fitted_width``'s): ``space``'s unsplit im2col schedules as wide as
    the filters (C stored directly); for channels that boxes of 32 pad less than boxes of 64, the same with boxes of
    32 (``chunk``)."""
    if op is None or op.r * op.s == 1:
        return
    cp, (low, high) = channels_padded(op), FITTED_FILTERS
    narrow = -(-cp // 32) * 32 < -(-cp // 64) * 64
    for s in [s for s in space if s.path == "im2col" and s.split == 1 and s.chunk == 64]:
        fitted = s.bn == -(-op.k // 64) * 64 and op.k % 64 != 0 and low <= op.k <= high
        if fitted:
            yield dataclasses.replace(s, bn=-(-op.k // 8) * 8, store="direct")
        if narrow:
            yield dataclasses.replace(s, chunk=32)
            if fitted:
                yield dataclasses.replace(s, bn=-(-op.k // 8) * 8, store="direct", chunk=32)
