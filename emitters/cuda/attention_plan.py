"""Which (q tile, k tile) pairs a CUDA attention kernel visits, decided on the host (issue 17).

A kernel of ``bq`` x ``bk`` tiles walks, for its q tile, only the k tiles the mask keeps a pair in: a CSR
list (``ptr`` over q tiles, ``idx`` the entries) built once per (op, bq, bk) from the causal band, the
window and the block mask. Tiles outside the list are never loaded. Each entry is ``k_tile << 1 | partial``:
a *full* tile keeps every pair of its rows (that exist) and columns, so the kernel skips the element test;
a *partial* one (the band's edge, a block mask cut inside the tile, the last k tile past ``seq_k``) tests
each element with ``tr_attn_keep``, the same rule as the float64 reference (kernels/ops/attention.py):

    keep(i, j) = j < seq_k and -left <= j - i - diag <= right and (no block mask or its bit at (i/bq', j/bk'))

with ``diag = seq_k - seq_q`` (the diagonal aligned bottom-right) and (left, right) from ``Attention._bounds``
(causal folded into right). ``order`` lists the q tiles most work first (longest first, so that the causal
triangle's long rows do not end the launch alone). Both CUDA attention cores (mma.sync and wgmma) read it
through the same kernel parameters (``PARAMS``, ``mask_scalars``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Pointer parameters of every CUDA attention kernel, then its int scalars, then its float scalars.
BUFFERS = ("q", "k", "v", "out", "lse", "tile_ptr", "tile_idx", "bmask")
INT_SCALARS = ("batch", "heads", "kv_heads", "seq_q", "seq_k", "diag", "win_left", "win_right",
               "bm_cols", "bm_bq", "bm_bk")
FLOAT_SCALARS = ("scale_log2",)
PARAMS = BUFFERS + INT_SCALARS + FLOAT_SCALARS
LOG2E = 1.4426950408889634

# The element test of a partial tile (device code, shared by both cores).
KEEP_FN = r"""/* Whether query row i keeps key j (the reference's mask: bounds, band, block mask). */
static __device__ __forceinline__ bool tr_attn_keep(int i, int j, int seq_k, int diag, int win_left, int win_right,
                                                    const unsigned char* __restrict__ bmask, int bm_cols, int bm_bq,
                                                    int bm_bk) {
    const int d = j - i - diag;
    bool keep = j < seq_k && d >= -win_left && d <= win_right;
    if (keep && bmask != nullptr) keep = bmask[(i / bm_bq) * bm_cols + j / bm_bk] != 0;
    return keep;
}
"""


def schedule_json(s: Any, version: int) -> dict[str, Any]:
    """An attention schedule's JSON (both CUDA attention cores' and the decode core's dataclasses)."""
    import dataclasses

    return {"schema_version": version, "backend": "cuda", "kernel": "attention", **dataclasses.asdict(s)}


def read_schedule(cls: type, d: dict[str, Any], version: int) -> Any:
    """An attention schedule of ``cls`` from its JSON (``kernel`` dropped, fields checked), validated."""
    from ..schedule import schedule_fields

    d = dict(d)
    d.pop("kernel", None)
    s = cls(**schedule_fields(d, cls, "cuda", "CUDA", ("core",), version))
    s.validate()
    return s


@dataclass(frozen=True)
class TilePlan:
    """The CSR walk of one (op, bq, bk): q tile t visits ``idx[ptr[t]:ptr[t + 1]]`` (``k_tile << 1 |
    partial``) in increasing k; ``order`` is the q tiles by decreasing entry count (ties: by index)."""

    bq: int
    bk: int
    q_tiles: int
    k_tiles: int
    ptr: np.ndarray  # int32, q_tiles + 1
    idx: np.ndarray  # int32, ptr[-1]
    order: np.ndarray  # int32, q_tiles

    @property
    def computed(self) -> int:
        """Tiles computed per (batch, head)."""
        return int(self.ptr[-1])

    @property
    def partial(self) -> int:
        return int((self.idx & 1).sum())

    def entries(self, t: int) -> list[tuple[int, bool]]:
        """(k tile, partial) of q tile ``t``: for tests and reports."""
        return [(int(e) >> 1, bool(e & 1)) for e in self.idx[self.ptr[t]:self.ptr[t + 1]]]


def tile_plan(op: Any, bq: int, bk: int) -> TilePlan:
    """The tiles of ``op`` a ``bq`` x ``bk`` kernel visits, and which of them need the element test.

    A q tile's kept keys before the block mask form one range per row whose ends grow with the row, so
    the tile's union is [lo of its first row, hi of its last) and its intersection [lo of its last row,
    hi of its first); a k tile inside the intersection (and inside ``seq_k``) is full. With a block mask,
    a k tile is visited if some kept block overlaps it inside the union, and is full only if every block
    it overlaps (over the tile's real rows) is kept and it is full by the band."""
    nq, nk = -(-op.seq_q // bq), -(-op.seq_k // bk)
    r0 = np.arange(nq) * bq
    r1 = np.minimum(r0 + bq, op.seq_q) - 1  # last real row of each q tile
    lo_first, hi_first = op._key_ranges(r0)
    lo_last, hi_last = op._key_ranges(r1)
    c0 = np.arange(nk) * bk
    c1 = np.minimum(c0 + bk, op.seq_k)  # one past the last real key
    union_lo, union_hi = lo_first[:, None], hi_last[:, None]
    visit = (np.maximum(union_lo, c0[None, :]) < np.minimum(union_hi, c1[None, :])) & (lo_first < hi_last)[:, None]
    full = (lo_last[:, None] <= c0[None, :]) & (c1[None, :] <= hi_first[:, None]) & ((c0 + bk) <= op.seq_k)[None, :]
    bm = op.block_mask_array()
    if bm is not None:
        mq, mk = op.block_size
        pre = np.zeros((bm.shape[0] + 1, bm.shape[1] + 1), np.int64)  # 2-D prefix sums of kept blocks
        pre[1:, 1:] = bm.astype(np.int64).cumsum(0).cumsum(1)
        a0, a1 = (r0 // mq)[:, None], (r1 // mq + 1)[:, None]  # the mask rows a q tile's real rows span
        b0, b1 = (c0 // mk)[None, :], ((c1 - 1) // mk + 1)[None, :]
        kept = pre[a1, b1] - pre[a0, b1] - pre[a1, b0] + pre[a0, b0]
        visit &= kept > 0
        full &= kept == (a1 - a0) * (b1 - b0)
    full &= visit
    counts = visit.sum(axis=1).astype(np.int32)
    ptr = np.zeros(nq + 1, np.int32)
    np.cumsum(counts, out=ptr[1:])
    tq, tk = np.nonzero(visit)  # row-major: by q tile, then increasing k tile
    idx = (tk.astype(np.int32) << 1) | (~full[tq, tk]).astype(np.int32)
    order = np.lexsort((np.arange(nq), -counts)).astype(np.int32)
    return TilePlan(bq, bk, nq, nk, ptr, idx.astype(np.int32), order)


def mask_scalars(op: Any) -> dict[str, int | float]:
    """The kernels' int and float scalars for ``op`` (the block mask's own tiling in bm_*; 1 without one)."""
    left, right = op._bounds()
    bm = op.block_mask_array()
    return {"batch": op.batch, "heads": op.heads, "kv_heads": op.kv_heads, "seq_q": op.seq_q, "seq_k": op.seq_k,
            "diag": op.seq_k - op.seq_q, "win_left": int(min(left, op.seq_q + op.seq_k)),
            "win_right": int(min(right, op.seq_q + op.seq_k)),
            "bm_cols": int(bm.shape[1]) if bm is not None else 1,
            "bm_bq": op.block_size[0], "bm_bk": op.block_size[1], "scale_log2": op.scale * LOG2E}


def block_mask_bytes(op: Any) -> np.ndarray | None:
    """The block mask as uint8 rows (the kernel's ``bmask``), or None."""
    bm = op.block_mask_array()
    return None if bm is None else np.ascontiguousarray(bm.astype(np.uint8))


def keep_model(op: Any, plan: TilePlan) -> np.ndarray:
    """The kept (query, key) pairs as the kernel would see them, in NumPy: every visited tile's pairs,
    with the element test only on partial tiles. Tests compare it with ``op.keep_mask``."""
    out = np.zeros((op.seq_q, op.seq_k), bool)
    for t in range(plan.q_tiles):
        rs = slice(t * plan.bq, min((t + 1) * plan.bq, op.seq_q))
        for k_tile, partial in plan.entries(t):
            cs = slice(k_tile * plan.bk, min((k_tile + 1) * plan.bk, op.seq_k))
            out[rs, cs] = op.keep_mask(rs.start, rs.stop, cs.start, cs.stop) if partial else True
    return out
