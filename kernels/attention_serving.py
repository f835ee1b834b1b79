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

INDEX_INPUTS = ("block_table", "seq_lens", "cu_seqlens")  # the int32 inputs of a serving op
SERVING_FIELDS = ("seq_lens", "page_size", "pages", "packed")  # left out of the signature while None (False)


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


def check_fields(op: Any) -> dict[str, Any]:
    """The serving fields of ``op`` checked (kernels/ops/attention.py's module docstring): their values as
    the op keeps them, or one ``BadInputError`` naming the field."""
    out: dict[str, Any] = {}
    lens = None if op.seq_lens is None else seq_lens_field(op.seq_lens, op.batch, op.seq_k)
    if lens is not None:
        out["seq_lens"] = lens
    if not isinstance(op.packed, (bool, np.bool_)):
        raise BadInputError(f"packed: expected true or false, got {op.packed!r}")
    if op.packed:
        if lens is None or op.page_size is not None or op.seq_q != op.seq_k:
            raise BadInputError("packed: packed entries need seq_lens (each entry's queries and keys), seq_q = seq_k "
                                "(the longest entry, or more) and no page_size",
                                "give --seq-lens; --seq and --seq-k default to the longest")
        if sum(lens) == 0:
            raise BadInputError("seq_lens: every packed entry is empty; give at least one token")
        out["packed"] = True
    if op.page_size is None:
        if op.pages is not None:
            raise BadInputError("pages: a pool's page count needs page_size", "give page_size too, or drop pages")
    else:
        page = fields.positive("page_size", op.page_size)
        # any pool: entries may share pages (a common prefix), so fewer pages than the entries use is a pool too
        pages = op.batch * -(-op.seq_k // page) if op.pages is None else fields.positive("pages", op.pages)
        fields.elements("k (pages x page_size x kv_heads x head_dim)", pages, page, op.kv_heads, op.head_dim)
        out.update(page_size=page, pages=pages)
    if op.block_mask is not None and (lens is not None or op.page_size is not None):
        raise BadInputError("block_mask: a block mask tiles one seq_k; it does not combine with seq_lens or "
                            "page_size", "use causal or window")
    return out


def offsets(op: Any) -> np.ndarray:
    """Packed entries' cumulative offsets (batch + 1, int32): entry b's tokens are rows [cu[b], cu[b + 1])."""
    return np.concatenate([[0], np.cumsum(op.key_lens)]).astype(np.int32)


def random_index_inputs(op: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A paged pool's pages dealt to the entries in a random order (so a kernel cannot rely on their order; a
    pool smaller than the entries' pages deals them again, shared), the table's unused entries -1; the lengths
    of ``seq_lens``."""
    out: dict[str, np.ndarray] = {}
    if op.page_size:
        table = np.full((op.batch, op.table_cols), -1, dtype=np.int32)
        need = sum(-(-n // op.page_size) for n in op.key_lens)
        order = np.resize(rng.permutation(op.pages).astype(np.int32), max(need, 1))
        at = 0
        for b, n in enumerate(op.key_lens):
            used = -(-n // op.page_size)
            table[b, :used] = order[at:at + used]
            at += used
        out["block_table"] = table
    if op.packed:
        out["cu_seqlens"] = offsets(op)
    elif op.seq_lens is not None:
        out["seq_lens"] = np.array(op.seq_lens, dtype=np.int32)
    return out


def check_inputs(op: Any, inputs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """(lengths, block table) of ``inputs`` as int64 arrays, checked as any kernel must have them: every
    length in [0, seq_k] (the keys an entry's table row can address), every table entry an entry uses
    inside the pool [0, pages). One ``BadInputError`` naming the first fault otherwise."""
    if op.packed:
        offs = _index_input(inputs, "cu_seqlens", (op.batch + 1,))
        return check_offsets(offs, sum(op.key_lens), op.seq_k, "seq_k"), None
    if op.seq_lens is None:
        lens = np.full(op.batch, op.seq_k, dtype=np.int64)
    else:
        lens = _index_input(inputs, "seq_lens", (op.batch,))
        check_lengths(lens, op.seq_k, f"the block table's {op.table_cols} pages of {op.page_size} keys"
                      if op.page_size else "k's sequence length")
    if not op.page_size:
        return lens, None
    table = _index_input(inputs, "block_table", (op.batch, op.table_cols))
    check_table(table, lens, op.page_size, op.pages)
    return lens, table


# The value checks every caller makes (the op's inputs here, tracea.ops' arrays before a launch), on host int64
# arrays; ``prefix`` leads the message (tracea.ops: "attention: ").

def check_lengths(lens: np.ndarray, capacity: int, why: str, prefix: str = "") -> None:
    """Every length in [0, capacity] (``why``: what the capacity is)."""
    bad = np.flatnonzero((lens < 0) | (lens > capacity))
    if bad.size:
        b = int(bad[0])
        raise BadInputError(f"{prefix}seq_lens[{b}]: {int(lens[b])} keys, outside 0..{capacity} ({why})")


def check_table(table: np.ndarray, lens: np.ndarray, page: int, pages: int, prefix: str = "") -> None:
    """Every table entry an entry reads (its pages up to its length) inside the pool [0, pages)."""
    used = np.arange(table.shape[1])[None, :] * page < lens[:, None]
    bad = np.argwhere(used & ((table < 0) | (table >= pages)))
    if bad.size:
        b, c = (int(x) for x in bad[0])
        raise BadInputError(f"{prefix}block_table[{b}, {c}]: page {int(table[b, c])} is outside the pool of {pages} "
                            f"pages (entry {b} holds {int(lens[b])} keys, so it reads that page)")


def check_offsets(offs: np.ndarray, total: int, most: int, most_name: str, prefix: str = "") -> np.ndarray:
    """Packed entries' lengths from their offsets, which must start at 0, never decrease, end at the tokens
    (``total``), and give no entry more than ``most`` (``most_name`` says what bounds it)."""
    if offs[0] != 0 or offs[-1] != total:
        raise BadInputError(f"{prefix}cu_seqlens: the offsets run from {int(offs[0])} to {int(offs[-1])}, expected 0 "
                            f"to {total} (the tokens q, k and v hold)")
    lens = np.diff(offs)
    bad = np.flatnonzero((lens < 0) | (lens > most))
    if bad.size:
        b = int(bad[0])
        raise BadInputError(f"{prefix}cu_seqlens[{b + 1}] = {int(offs[b + 1])}: " + (
            f"below cu_seqlens[{b}] = {int(offs[b])} (offsets must not decrease)" if lens[b] < 0 else
            f"entry {b} holds {int(lens[b])} tokens, more than {most_name}={most}"))
    return lens


def page_rows(table_row: np.ndarray, n: int, page: int, pages: int) -> np.ndarray:
    """The pool rows (page * page_size + offset, int64) of an entry's first ``n`` keys through its table row,
    each page clamped into [0, pages) as the kernels clamp it."""
    used = np.clip(np.asarray(table_row[:-(-n // page)], dtype=np.int64), 0, pages - 1)
    return (used[:, None] * page + np.arange(page)).reshape(-1)[:n]


def gather_kv(op: Any, inputs: Mapping[str, Any], b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Entry b's first ``n`` keys of K and V as (kv_heads, n, head_dim) arrays, through its pages (packed:
    its rows of the token-major K and V)."""
    k, v = np.asarray(inputs["k"]), np.asarray(inputs["v"])
    if op.packed:
        at = int(np.asarray(inputs["cu_seqlens"])[b])
        return k[at:at + n].swapaxes(0, 1), v[at:at + n].swapaxes(0, 1)
    if not op.page_size:
        return k[b, :, :n], v[b, :, :n]
    rows = page_rows(np.asarray(inputs["block_table"])[b], n, op.page_size, op.pages)
    flat = (-1, op.kv_heads, op.head_dim)
    return k.reshape(flat)[rows].swapaxes(0, 1), v.reshape(flat)[rows].swapaxes(0, 1)


def reference(op: Any, inputs: dict[str, np.ndarray], chunk_rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Entry by entry: its keys gathered (through its pages) at the length the inputs give, the plain
    reference of that entry; an entry of no keys is 0 with lse -inf."""
    lens, _ = op.check_serving_inputs(inputs)
    out = np.zeros(op.output_shape())
    lse = np.full(op.lse_shape(), -np.inf)
    at = 0
    for b, n in enumerate(lens.tolist()):
        e = op.entry(n)
        k, v = op.gather_kv(inputs, b, n) if e is not None else (None, None)
        if op.packed:  # the entry's token rows of q, O and lse
            if e is not None:
                q = np.asarray(inputs["q"])[at:at + n].swapaxes(0, 1)[None]
                o, m = e.reference_with_lse({"q": q, "k": k[None], "v": v[None]}, chunk_rows)
                out[at:at + n], lse[:, at:at + n] = o[0].swapaxes(0, 1), m[0]
            at += n
        elif e is not None:
            o, m = e.reference_with_lse({"q": inputs["q"][b:b + 1], "k": k[None], "v": v[None]}, chunk_rows)
            out[b], lse[b] = o[0], m[0]
    return out, lse
