"""The CPU search space: every CpuSchedule worth measuring for an op on this host, hero first.

Parameters: the micro-kernel shape ``mr x nr`` (register blocking), the cache blocks ``mc``/``kc``/``nc``,
``threads``, the k-loop ``unroll`` and the ``prefetch`` distance. What is kept:

- valid (``CpuSchedule.validate``: registers, lanes, threads of this host);
- micro-kernels that use most of the register file (at least 60 % of the vector registers hold
  accumulators: smaller tiles leave FMA throughput on the table and only lengthen the search);
- cache blocks clamped to the problem (an ``mc`` larger than m, rounded up to ``mr``, computes the
  same thing as the clamped one; the duplicate is dropped);
- threads: 1, the powers of two below the core count, and every logical core.

Softmax reads only ``threads``; its space is the thread counts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tracea.doctor.errors import BadInputError

from ..schedule import FAMILY_REGISTERS, CpuSchedule
from .build import hero_schedule
from .variants import resolve

MC_VALUES = (32, 64, 128, 256, 512)
KC_VALUES = (64, 128, 256, 512, 1024)
NC_VALUES = (256, 1024, 4096)
UNROLL_VALUES = (1, 2, 4, 8)
PREFETCH_VALUES = (0, 2, 8)
MIN_ACCUMULATOR_SHARE = 0.6


def micro_kernels(family: str) -> list[tuple[int, int]]:
    """(mr, nr) pairs of ``family`` whose accumulators fill most of the register file, widest nr first;
    for each nr the three tallest even mr that fit."""
    lanes, vregs = FAMILY_REGISTERS[family]
    widths = [lanes * v for v in (4, 3, 2, 1)] if lanes > 1 else [8, 6, 4]  # scalar: nr columns, nr registers
    out: list[tuple[int, int]] = []
    for nr in widths:
        vectors = nr // lanes
        fits = [mr for mr in range(32, 0, -2)
                if mr * vectors + vectors + 1 <= vregs and mr * vectors >= MIN_ACCUMULATOR_SHARE * vregs]
        out += [(mr, nr) for mr in fits[:3]]
    return out


def thread_counts(host: Any) -> list[int]:
    cores = max(1, getattr(getattr(host, "cpu", None), "logical_cores", None) or 1)
    counts = {1, cores}
    t = 2
    while t < cores:
        counts.add(t)
        t *= 2
    return sorted(counts, reverse=True)


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _problem_dims(op: Any) -> tuple[int, int, int]:
    """The GEMM the kernel runs: (rows of C, columns of C, reduction); conv2d as its implicit GEMM."""
    if op.kind == "gemm":
        return op.m, op.n, op.k
    if op.kind == "conv2d":
        oh, ow = op.output_shape()[-2:] if op.layout == "nchw" else op.output_shape()[1:3]
        return op.n * oh * ow, op.k // op.groups, (op.c // op.groups) * op.r * op.s
    raise BadInputError(f"no blocked search space for {op.kind}")


def _clamp(s: CpuSchedule, dims: tuple[int, int, int]) -> CpuSchedule:
    m, n, k = dims
    return dataclasses.replace(s, mc=min(s.mc, _round_up(m, s.mr)), nc=min(s.nc, _round_up(n, s.nr)),
                               kc=min(s.kc, _round_up(k, 16)))


def search_space(op: Any, variant: Any, host: Any) -> list[CpuSchedule]:
    """Every valid candidate for ``op`` with ``variant`` on ``host``, the hero schedule first."""
    v = resolve(variant)
    hero = hero_schedule(op, v, host)
    threads = thread_counts(host)
    if op.kind == "softmax":
        cands = [hero] + [dataclasses.replace(hero, threads=t) for t in threads]
    else:
        dims = _problem_dims(op)
        hero = _clamp(hero, dims)
        cands = [hero]
        for mr, nr in micro_kernels(v.family):
            for mc in MC_VALUES:
                for kc in KC_VALUES:
                    for nc in NC_VALUES:
                        if mc % mr:
                            mc_r = _round_up(mc, mr)
                        else:
                            mc_r = mc
                        base = CpuSchedule(mr=mr, nr=nr, mc=mc_r, kc=kc, nc=_round_up(nc, nr))
                        for t in threads:
                            for u in UNROLL_VALUES:
                                for p in PREFETCH_VALUES:
                                    cands.append(_clamp(dataclasses.replace(base, threads=t, unroll=u, prefetch=p),
                                                        dims))
    out: list[CpuSchedule] = []
    seen: set[CpuSchedule] = set()
    for s in cands:
        if s in seen:
            continue
        seen.add(s)
        try:
            s.validate(op, host, v)
        except BadInputError:
            continue
        out.append(s)
    return out
