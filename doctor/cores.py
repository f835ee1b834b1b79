"""Dividing this machine's cores between processes that must not share them (the tuner's pool members,
tuner/pool.py; the CPU backend's ``tuning_members``)."""

from __future__ import annotations

import os

from .errors import BadInputError


def cpu_sets(n: int, cpus: list[int] | None = None) -> list[tuple[int, ...]]:
    """``n`` disjoint sets of ``cpus`` (default: the cores this process may use), as even as possible, each
    of consecutive cores (the first ones one larger when the count does not divide)."""
    cores = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if n < 1 or n > len(cores):
        raise BadInputError(f"--workers: {n} CPU workers need as many cores; this process may use {len(cores)}",
                            f"--workers 1..{len(cores)}")
    size, extra = divmod(len(cores), n)
    out, at = [], 0
    for i in range(n):
        k = size + (1 if i < extra else 0)
        out.append(tuple(cores[at:at + k]))
        at += k
    return out
