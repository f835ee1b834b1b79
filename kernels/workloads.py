"""The shapes users bring, as named suites of ops: what ``tracea bench`` measures when no operation is named.
Each op's file holds its suites (``Op.suites``: ``llm-gemm`` in ops/gemm.py, ``resnet50`` in ops/conv2d.py,
``softmax`` in ops/softmax.py); this module gathers them in the ops' order.

A backend names the kind of machine it runs on (``TARGETS``: "host" for a CPU, "device" for a GPU), and each suite picks the dtypes and
sizes users of such a machine run (``emitters/<backend>/suite.py``); ``quick`` subsets keep a few rows of each
for CI.
"""

from __future__ import annotations

from typing import Any

from .op import OPS, TARGETS, Suite


def named() -> dict[str, Suite]:
    """Every op's suites by name, in the ops' order."""
    return {s.name: s for cls in OPS.values() for s in cls.suites}


def suites(target: str, quick: bool = False) -> dict[str, list[Any]]:
    """The ops of every suite for a backend of ``target`` (one of ``TARGETS``), by suite name; a suite without rows
    for the target (int8 GEMMs on a GPU, for now) is left out."""
    found = {name: s.ops(target, quick) for name, s in named().items()}
    return {name: ops for name, ops in found.items() if ops}


def summary() -> dict[str, str]:
    """A line per suite, for ``tracea bench --list``."""
    return {name: s.summary for name, s in named().items()}


def check_suite(name: str) -> str:
    """``name`` if it names a suite; BadInputError listing them otherwise."""
    from tracea.doctor.errors import BadInputError

    if name not in named():
        raise BadInputError(f"--suite: no suite {name!r}; choose from {', '.join(named())} (tracea bench --list)")
    return name


__all__ = ["TARGETS", "named", "suites", "summary", "check_suite"]
