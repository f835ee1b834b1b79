"""Attention's serving forms (kernels/ops/attention.py's module docstring says what they are): per-entry key
lengths (``seq_lens``) and a paged K/V cache (``page_size``): the field's check, the index inputs' draw and
check, the gather through the pages, and the reference entry by entry. Functions of an ``Attention`` (read by
its methods; this module imports no op)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from . import fields

INDEX_INPUTS = ("block_table", "seq_lens")  # the int32 inputs of a serving op
SERVING_FIELDS = ("seq_lens", "page_size", "pages")  # left out of the signature while None


def _index_input(inputs: Mapping[str, Any], name: str, shape: tuple[int, ...]) -> np.ndarray:
    """An index input of ``inputs`` (any integer array of ``shape``) as int64 values."""
    x = inputs.get(name) if hasattr(inputs, "get") else None
    if x is None:
        raise BadInputError(f"inputs: missing {name!r} (int32 {shape})")
    x = np.asarray(x)
    if x.shape != shape or x.dtype.kind not in "iu":
        raise BadInputError(f"{name}: expected an integer array of shape {shape}, got {x.shape} {x.dtype}")
    return x.astype(np.int64)


def seq_lens_field(value: Any, batch: int, seq_k: int) -> tuple[int, ...]:
    """The ``seq_lens`` field checked: one key count in [0, seq_k] per batch entry."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, (tuple, list)) or len(value) != batch:
        got = f"{len(value)} entries" if isinstance(value, (tuple, list)) else type(value).__name__
        raise BadInputError(f"seq_lens: expected one key count per batch entry ({batch}), got {got}")
    lens = tuple(fields.non_negative(f"seq_lens[{b}]", n) for b, n in enumerate(value))
    for b, n in enumerate(lens):
        if n > seq_k:
            raise BadInputError(f"seq_lens[{b}]: {n} keys, more than seq_k={seq_k} (the longest an entry may hold)")
    return lens


def random_index_inputs(op: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A paged pool's pages dealt to the entries in a random order (so a kernel cannot rely on their order), the
    table's unused entries -1; the lengths of ``seq_lens``."""
    out: dict[str, np.ndarray] = {}
    if op.page_size:
        table = np.full((op.batch, op.table_cols), -1, dtype=np.int32)
        order = rng.permutation(op.pages).astype(np.int32)
        at = 0
        for b, n in enumerate(op.key_lens):
            used = -(-n // op.page_size)
            table[b, :used] = order[at:at + used]
            at += used
        out["block_table"] = table
    if op.seq_lens is not None:
        out["seq_lens"] = np.array(op.seq_lens, dtype=np.int32)
    return out


def check_inputs(op: Any, inputs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """(lengths, block table) of ``inputs`` as int64 arrays, checked as any kernel must have them: every
    length in [0, seq_k] (the keys an entry's table row can address), every table entry an entry uses
    inside the pool [0, pages). One ``BadInputError`` naming the first fault otherwise."""
    if op.seq_lens is None:
        lens = np.full(op.batch, op.seq_k, dtype=np.int64)
    else:
        lens = _index_input(inputs, "seq_lens", (op.batch,))
        bad = np.flatnonzero((lens < 0) | (lens > op.seq_k))  # type: ignore[operator]
        if bad.size:
            b = int(bad[0])
            raise BadInputError(f"seq_lens[{b}]: {int(lens[b])} keys, outside 0..{op.seq_k}" + (
                f" (the block table's {op.table_cols} pages of {op.page_size} keys)" if op.page_size else
                " (k's sequence length)"))
    if not op.page_size:
        return lens, None
    table = _index_input(inputs, "block_table", (op.batch, op.table_cols))
    used = np.arange(op.table_cols)[None, :] < -(-lens[:, None] // op.page_size)
    bad = np.argwhere(used & ((table < 0) | (table >= op.pages)))  # type: ignore[operator]
    if bad.size:
        b, c = (int(x) for x in bad[0])
        raise BadInputError(f"block_table[{b}, {c}]: page {int(table[b, c])} is outside the pool of {op.pages} "
                            f"pages (entry {b} holds {int(lens[b])} keys, so it reads that page)")
    return lens, table


def gather_kv(op: Any, inputs: Mapping[str, Any], b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Entry b's first ``n`` keys of K and V as (kv_heads, n, head_dim) arrays, through its pages."""
    k, v = np.asarray(inputs["k"]), np.asarray(inputs["v"])
    if not op.page_size:
        return k[b, :, :n], v[b, :, :n]
    pages = np.asarray(inputs["block_table"])[b, :-(-n // op.page_size)]
    rows = (pages[:, None].astype(np.int64) * op.page_size + np.arange(op.page_size)).reshape(-1)[:n]
    flat = (-1, op.kv_heads, op.head_dim)
    return k.reshape(flat)[rows].swapaxes(0, 1), v.reshape(flat)[rows].swapaxes(0, 1)


def reference(op: Any, inputs: dict[str, np.ndarray], chunk_rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Entry by entry: its keys gathered (through its pages) at the length the inputs give, the plain
    reference of that entry; an entry of no keys is 0 with lse -inf."""
    lens, _ = op.check_serving_inputs(inputs)
    out = np.zeros(op.output_shape())
    lse = np.full(op.lse_shape(), -np.inf)
    for b, n in enumerate(lens.tolist()):
        e = op.entry(n)
        if e is None:
            continue
        k, v = op.gather_kv(inputs, b, n)
        o, m = e.reference_with_lse({"q": inputs["q"][b:b + 1], "k": k[None], "v": v[None]}, chunk_rows)
        out[b], lse[b] = o[0], m[0]
    return out, lse
