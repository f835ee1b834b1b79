"""Attention's block mask as the op keeps it: a 2-D boolean map of (q block, k block) tiles, read from a NumPy
array, rows of booleans, or rows of '0'/'1' strings (JSON's form), checked against the op's grid."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError


def _mask_rows(value: Any) -> tuple[str, ...]:
    """A block mask (a bool array, rows of bools, or rows of '0'/'1' strings as JSON holds it) as
    '0'/'1' strings, one per q block."""
    if isinstance(value, np.ndarray):
        if value.dtype != np.bool_:
            raise BadInputError(f"block_mask: expected a boolean array, got dtype {value.dtype}")
        if value.ndim != 2:
            raise BadInputError(f"block_mask: expected a 2-D (q block x k block) map, got {value.ndim} dimensions")
        return tuple("".join("1" if b else "0" for b in row) for row in value.tolist())
    if not isinstance(value, (tuple, list)) or not value:
        raise BadInputError(f"block_mask: expected a 2-D boolean map, got {type(value).__name__}")
    rows = []
    for row in value:
        if isinstance(row, str):
            if set(row) - {"0", "1"}:
                raise BadInputError("block_mask: a row string may hold only '0' and '1'")
            rows.append(row)
        elif isinstance(row, (tuple, list, np.ndarray)) and all(isinstance(b, (bool, np.bool_)) for b in row):
            rows.append("".join("1" if b else "0" for b in row))
        else:  # the row's type, not its repr: a repr may span lines, or fail (an int of 5000 digits)
            raise BadInputError(f"block_mask: expected rows of booleans, got a {type(row).__name__} row")
    return tuple(rows)


def check_block_mask(value: Any, seq_q: int, seq_k: int, block_size: tuple[int, int]) -> tuple[str, ...]:
    """A block mask as '0'/'1' row strings, refused unless it is a 2-D boolean map of ceil(seq_q / bq) x
    ceil(seq_k / bk) tiles: the op's own check, also for callers whose call may never build the op (a
    fallback must not read a mask of another shape)."""
    rows = _mask_rows(value)
    want = (-(-seq_q // block_size[0]), -(-seq_k // block_size[1]))
    # an empty map is the wrong shape, said as such, unless the op has no query rows (no row tells the width)
    got = (len(rows), len(rows[0]) if rows else want[1] if want[0] == 0 else 0)
    if any(len(r) != got[1] for r in rows) or got != want:
        raise BadInputError(
            f"block_mask: expected {want[0]} x {want[1]} tiles (ceil(seq_q/{block_size[0]}) x "
            f"ceil(seq_k/{block_size[1]})), got {got[0]} x {got[1]}" + (
                "" if all(len(r) == got[1] for r in rows) else " with ragged rows"))
    return rows
