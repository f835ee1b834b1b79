"""Placeholder until the doctor's BLAS pin check lands (branch doctorcpu): nothing is reported pinned."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pinned_below(cpu: Any, environ: Mapping[str, str]) -> list[str]:
    return []
