"""Packed variable-length entries on the Hopper attention kernel (issue 33): FlashAttention's varlen layout,
q (tokens, heads, head_dim), k and v (tokens, kv_heads, head_dim), O like q, lse (heads, tokens), entry b's
tokens rows [cu_seqlens[b], cu_seqlens[b + 1]) of each, its queries attending to its own keys.

Nothing of an entry's lengths is known on the host (the offsets are read by the kernel at each launch), so
the grid cannot list the entries' q tiles. It gives entry b the *slots* [cu[b] / bq + b, cu[b + 1] / bq + b
+ 1) (integer division): at least ceil(len / bq) of them (floor((a + n) / bq) - floor(a / bq) >= floor(n /
bq)), disjoint, increasing with b, and ``tokens / bq + batch`` in all, so a launch of that many blocks a head
covers every q tile of every entry for any offsets, at most one idle block an entry. A block finds its entry
by a binary search over the offsets (their slot starts strictly increase with b), its q tile as the slot's
place in the entry, and returns at once past the entry's last tile. Slots run backwards (the last q tile of
the last entry first): under a causal mask an entry's late tiles are its long ones.

A block's key tiles are computed, not listed: with the entry's rows r0..r1 (r1 clipped to its length) and the
band [i + diag - left, i + diag + right] of row i (``diag`` 0: an entry's queries are its keys), the union
of its rows' keys is [r0 + diag - left, r1 + diag + right] within [0, len), one run of tiles kt0..kt0 + n - 1;
a tile is full (no element test) when it lies within every row's band and the entry: kt bk >= r1 + diag -
left and kt bk + bk - 1 <= min(r0 + diag + right, len - 1). The TMA maps are 3-d over (head dim, tokens,
heads) with a token stride of heads x head_dim: a tile crossing the entry's end reads the next entry's rows
(keys past ``len`` are masked by the element test, rows past it never stored), past the last token zeros.
``model`` runs this indexing in NumPy for the CPU tests.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..attention_plan import PARAMS

PACKED_PARAMS = PARAMS + ("cu_seqlens", "tokens", "tmQ", "tmK", "tmV")

# The plain form's last parameters with the offsets and the token count in place of ``order``; the op's
# seq_q and seq_k (the entries' capacity) are renamed: the kernel's seq_q and seq_k are the entry's length.
SIGNATURE_CHANGES = (("int seq_q, int seq_k", "int cap_q, int cap_k"),
                     ("const int* __restrict__ order", "const int* __restrict__ cu_seqlens, int tokens"))


def signature(plain: str) -> str:
    for old, new in SIGNATURE_CHANGES:
        assert old in plain
        plain = plain.replace(old, new)
    return plain


def entry_lines(bq: int, bk: int) -> str:
    """Device lines: the block's head, entry and q tile from its slot, returning past the entry's tiles; then
    the entry's length as seq_q and seq_k, its run of key tiles (kt0, n) and ``tr_ent(e)`` (the plain form's
    plan entry ``kt << 1 | partial``)."""
    return f"""    const int slots = tokens / {bq} + batch;
    const int h = (int)(blockIdx.x / (unsigned)slots), g = slots - 1 - ((int)blockIdx.x - h * slots);
    int b = 0;  /* the last entry whose first slot is at most g (slot starts increase strictly with b) */
    for (int hi = batch - 1; b < hi;) {{
        const int mid = (b + hi + 1) >> 1;
        if (min(max(cu_seqlens[mid], 0), tokens) / {bq} + mid <= g) b = mid; else hi = mid - 1;
    }}
    const int tok0 = min(max(cu_seqlens[b], 0), tokens);
    const int seq_q = min(max(cu_seqlens[b + 1], tok0), tokens) - tok0, seq_k = seq_q;
    const int qt = g - (tok0 / {bq} + b);
    if (qt < 0 || qt * {bq} >= seq_q) return;  /* past the entry's last q tile: nothing to compute or store */
    const int kvh = h / (heads / kv_heads);
    if (win_left >= cap_q + cap_k) win_left = 2 * seq_k;  /* unbounded for the capacity: for this entry too */
    if (win_right >= cap_q + cap_k) win_right = 2 * seq_k;
    const int r0 = qt * {bq}, r1 = min(r0 + {bq}, seq_q) - 1;
    const int k_lo = max(0, r0 + diag - win_left), k_hi = min(seq_k - 1, r1 + diag + win_right);
    const int kt0 = k_lo / {bk}, n = k_lo > k_hi ? 0 : k_hi / {bk} - kt0 + 1;
    const int full_lo = r1 + diag - win_left, full_hi = min(seq_k - 1, r0 + diag + win_right);
    const auto tr_ent = [=](int e) {{
        const int kt = kt0 + e;
        return kt << 1 | (int)(kt * {bk} < full_lo || kt * {bk} + {bk - 1} > full_hi);
    }};"""


def head(sm: dict[str, int], stages: int, barriers_per_stage: int, bq: int, bk: int, ring_init: str,
         barrier: str, mbar_fence: str) -> str:
    """The packed form's block head (the plain ``_head`` with ``entry_lines`` for the plan's order)."""
    return f"""    extern __shared__ __align__(1024) unsigned char tr_smem[];
    const uint32_t smem = (tr_smem_addr(tr_smem) + 1023u) & ~1023u;
    const uint32_t bars = smem + {sm['bars']}u;
    const uint32_t qbar = bars + {8 * barriers_per_stage * stages}u;
{entry_lines(bq, bk)}
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
{ring_init}        tr_mbar_init(qbar, 1u);
        {mbar_fence}
    }}
    {barrier}"""


def coordinates(bq: int, bk: int) -> dict[str, str]:
    """The TMA coordinates of the producer's loads (rows of the token dimension, then the head)."""
    return {"q_row": f"tok0 + qt * {bq}", "q_z": "h", "k_row": f"tok0 + kt * {bk}", "kv_z": "kvh"}


def addressing() -> dict[str, str]:
    """The store's element offsets: O's row (token-major, heads inner) and lse (heads, tokens)."""
    return {"out": "((long long)(tok0 + row) * heads + h)", "lse": "(long long)h * tokens + tok0 + row"}


def plan_entries(source: str) -> str:
    """The plain form's plan reads (``tile_idx[e0 + e]``) as the packed form's ``tr_ent(e)``."""
    return re.sub(r"tile_idx\[e0 \+ ([^\]]+)\]", r"tr_ent(\1)", source)


def slots(tokens: int, batch: int, bq: int) -> int:
    """Blocks a head of the packed grid: every entry's q tiles for any offsets (module docstring)."""
    return tokens // bq + batch


# ------------------------------------------------------------------------------ the NumPy model (CPU tests)


def block_entry(cu: np.ndarray, tokens: int, bq: int, x: int) -> tuple[int, int, int] | None:
    """(entry, token offset, q tile) of block slot ``x`` of a head as the kernel finds them, None for an idle
    slot: the backwards slot order, the binary search, the offsets clamped into the tokens."""
    batch = len(cu) - 1
    n_slots = slots(tokens, batch, bq)
    g = n_slots - 1 - x
    b, hi = 0, batch - 1
    clamp = lambda t: min(max(int(t), 0), tokens)  # noqa: E731
    while b < hi:
        mid = (b + hi + 1) >> 1
        if clamp(cu[mid]) // bq + mid <= g:
            b = mid
        else:
            hi = mid - 1
    tok0 = clamp(cu[b])
    length = min(max(int(cu[b + 1]), tok0), tokens) - tok0
    qt = g - (tok0 // bq + b)
    if qt < 0 or qt * bq >= length:
        return None
    return b, tok0, qt


def key_tiles(length: int, qt: int, bq: int, bk: int, diag: int, left: int, right: int) -> list[tuple[int, bool]]:
    """(k tile, partial) of q tile ``qt`` of an entry of ``length`` tokens, by the kernel's formulas."""
    r0, r1 = qt * bq, min(qt * bq + bq, length) - 1
    k_lo, k_hi = max(0, r0 + diag - left), min(length - 1, r1 + diag + right)
    if k_lo > k_hi:
        return []
    full_lo, full_hi = r1 + diag - left, min(length - 1, r0 + diag + right)
    return [(kt, kt * bk < full_lo or kt * bk + bk - 1 > full_hi) for kt in range(k_lo // bk, k_hi // bk + 1)]


def model(op: Any, inputs: dict[str, np.ndarray], bq: int, bk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(O, lse, visits) in float64 as the packed kernel computes them: each block slot of each head finds its
    entry and q tile, loads its Q rows and each listed key tile's rows at the kernel's token offsets (the
    next entry's rows where a tile crosses the entry's end, zeros past the last token), applies the element
    test on partial tiles only, and stores the rows inside its entry. ``visits`` counts the stores of each
    (token, head): exactly 1 where the offsets cover the tokens."""
    from tracea.kernels.dtypes import to_float64

    from ..attention_plan import mask_scalars

    sc = mask_scalars(op)
    q, k, v = (to_float64(np.asarray(inputs[n]), op.dtype) for n in ("q", "k", "v"))
    cu = np.asarray(inputs["cu_seqlens"])
    tokens, heads, d = q.shape
    far = sc["seq_q"] + sc["seq_k"]
    out, lse = np.zeros_like(q), np.full((heads, tokens), -np.inf)
    visits = np.zeros((tokens, heads), np.int64)
    rows = lambda x, t0, n: np.concatenate([x[t0:t0 + n], np.zeros((max(0, t0 + n - tokens),) + x.shape[1:])])  # noqa: E731
    for h in range(heads):
        kvh = h // (heads // op.kv_heads)
        for x in range(slots(tokens, len(cu) - 1, bq)):
            found = block_entry(cu, tokens, bq, x)
            if found is None:
                continue
            b, tok0, qt = found
            length = min(max(int(cu[b + 1]), tok0), tokens) - tok0
            wl = 2 * length if sc["win_left"] >= far else sc["win_left"]
            wr = 2 * length if sc["win_right"] >= far else sc["win_right"]
            qa = rows(q[:, h], tok0 + qt * bq, bq)
            s = np.full((bq, 0), -np.inf)
            vs = np.zeros((0, d))
            for kt, partial in key_tiles(length, qt, bq, bk, sc["diag"], wl, wr):
                st = qa @ rows(k[:, kvh], tok0 + kt * bk, bk).T * op.scale
                if partial:
                    i = qt * bq + np.arange(bq)[:, None]
                    j = kt * bk + np.arange(bk)[None, :]
                    dd = j - i - sc["diag"]
                    st = np.where((j < length) & (i < length) & (dd >= -wl) & (dd <= wr), st, -np.inf)
                s, vs = np.concatenate([s, st], 1), np.concatenate([vs, rows(v[:, kvh], tok0 + kt * bk, bk)])
            mx = s.max(1, initial=-np.inf)
            p = np.exp(s - np.where(np.isfinite(mx), mx, 0)[:, None])
            ls = p.sum(1)
            o = np.where(ls[:, None] > 0, p @ vs / np.where(ls > 0, ls, 1)[:, None], 0.0) if vs.size else 0.0 * qa
            for r in range(min(bq, length - qt * bq)):
                t = tok0 + qt * bq + r
                assert 0 <= t < tokens, "a store outside the tokens"
                out[t, h] = o[r]
                lse[h, t] = mx[r] + np.log(ls[r]) if ls[r] > 0 else -np.inf
                visits[t, h] += 1
    return out, lse, visits
