"""The schedule side of the CPU cores: the heuristic (hero) schedule, the check and the search spaces.

Space parameters: the micro-kernel shape ``mr x nr`` (register blocking), the cache blocks
``mc``/``kc``/``nc``, ``threads``, the k-loop ``unroll`` and the ``prefetch`` distance. What is kept:

- valid (``CpuSchedule.validate``: registers, lanes, threads of this host);
- micro-kernels that use most of the register file (at least 60 % of the vector registers hold
  accumulators: smaller tiles leave FMA throughput on the table and only lengthen the search);
- cache blocks clamped to the problem (an ``mc`` larger than m, rounded up to ``mr``, computes the
  same thing as the clamped one; the duplicate is dropped);
- threads: 1, the powers of two below the core count, and every logical core.

A core on the GEMM micro-kernel searches ``blocked_space``; a row kernel (softmax) reads only
``threads`` and searches ``rows_space``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tracea.doctor.errors import BadInputError
from tracea.doctor.variants import Variant

from .schedule import FAMILY_REGISTERS, CpuSchedule

# The A block's ceiling per family, below half of L2. AVX2 6x16: on a 2 MiB-L2 core an A block of half of L2
# (mc 252) ran at 0.81x NumPy (AVX2 OpenBLAS) at 2048, mc 60 at 0.93x (1024: 0.93x, 4096: 0.95x; CI machine,
# 2026-11-23, bench_cpu_gemm_probe.py); the AVX-512 8x48 kernel is the same at mc 64 and 256. Where L2 is
# 512 KiB (Zen 3) the ceiling changes nothing.
A_BLOCK_MAX = {"cpu-avx2-fma": 256 << 10}

MC_VALUES = (32, 64, 128, 256, 512)
KC_VALUES = (64, 128, 256, 512, 1024)
NC_VALUES = (256, 1024, 4096)
UNROLL_VALUES = (1, 2, 4, 8)
PREFETCH_VALUES = (0, 2, 8)
MIN_ACCUMULATOR_SHARE = 0.6


def hero_schedule(op: Any, v: Variant, host: Any) -> CpuSchedule:
    """A good default for this host: the micro-kernel shape of the family, blocks from the cache sizes
    (B micro-panel in half of L1 .. L2, A block in half of L2, B panel in a share of L3), all cores.
    ``v``: a resolved variant (``build.hero_schedule`` takes its id too)."""
    lanes, _ = FAMILY_REGISTERS[v.family]
    cpu = host.cpu
    cores = max(1, cpu.logical_cores or 1)
    del lanes
    l2 = cpu.l2_bytes_per_core or 1 << 20
    l3 = cpu.l3_bytes_total or 8 << 20
    # measured here (2-core Zen 4): 8x48, 6x64 and 14x32 within 3 %, 8x48 ahead at 1024..4096
    mr, nr = {"cpu-avx512": (8, 48), "cpu-avx2-fma": (6, 16), "cpu-neon": (8, 12), "cpu-portable": (4, 4)}[v.family]
    # KC: an A and a B micro-panel in a quarter of L2 (measured here: long K blocks win, the micro-panels
    # stream from L2 well and C is read and written fewer times), at most 1024
    kc = max(64, min(1024, (l2 // 4) // ((mr + nr) * 4)) // 64 * 64)
    mc = max(mr, min(l2 // 2, A_BLOCK_MAX.get(v.family, l2)) // (kc * 4) // mr * mr)  # A block: half of L2
    nc = max(nr, min(8192, (l3 // 2) // (kc * 4)) // nr * nr)  # B panel: half of L3
    # AVX-512 8x48 keeps 24 accumulators + 3 B vectors + the A broadcast in registers: unrolled by 2 it
    # compiles without a spill (by 4, gcc spills one zmm), at the same speed (CI machine, 2026-11-23)
    unroll = 2 if v.family == "cpu-avx512" else 4
    sched = CpuSchedule(mr=mr, nr=nr, mc=mc, kc=kc, nc=nc, threads=cores, unroll=unroll, prefetch=0)
    return sched


def check_schedule(op: Any, variant: Variant, schedule: CpuSchedule, host: Any) -> None:
    """What the host and the variant can run (``CpuSchedule.validate``); raises ``BadInputError``."""
    schedule.validate(op, host, variant)


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


def _clamp(s: CpuSchedule, dims: tuple[int, int, int]) -> CpuSchedule:
    m, n, k = dims
    return dataclasses.replace(s, mc=min(s.mc, _round_up(m, s.mr)), nc=min(s.nc, _round_up(n, s.nr)),
                               kc=min(s.kc, _round_up(k, 16)))


def blocked_space(op: Any, v: Variant, host: Any, dims: tuple[int, int, int]) -> list[CpuSchedule]:
    """Every valid candidate of a core on the GEMM micro-kernel, hero first; ``dims`` is the GEMM the
    kernel runs (rows of C, columns of C, reduction), to which the blocks are clamped."""
    hero = _clamp(hero_schedule(op, v, host), dims)
    threads = thread_counts(host)
    cands = [hero]
    for mr, nr in micro_kernels(v.family):
        for mc in MC_VALUES:
            for kc in KC_VALUES:
                for nc in NC_VALUES:
                    base = CpuSchedule(mr=mr, nr=nr, mc=_round_up(mc, mr), kc=kc, nc=_round_up(nc, nr))
                    for t in threads:
                        for u in UNROLL_VALUES:
                            for p in PREFETCH_VALUES:
                                cands.append(_clamp(dataclasses.replace(base, threads=t, unroll=u, prefetch=p),
                                                    dims))
    return valid_unique(op, v, host, cands)


def rows_space(op: Any, v: Variant, host: Any) -> list[CpuSchedule]:
    """A row kernel's candidates: the hero at every thread count."""
    hero = hero_schedule(op, v, host)
    return valid_unique(op, v, host, [hero] + [dataclasses.replace(hero, threads=t) for t in thread_counts(host)])


def valid_unique(op: Any, v: Variant, host: Any, cands: list[Any]) -> list[Any]:
    """``cands`` in order, each once, but those that do not validate for ``op`` on ``host`` (any CPU
    schedule class: the GEMM's, the attention's)."""
    out: list[Any] = []
    seen: set[Any] = set()
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
