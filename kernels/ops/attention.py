"""Scaled dot-product attention as an IR value (issue 17): O = softmax(Q K^T * scale + mask) V per head,
with grouped-query heads, a causal flag, a sliding window and a block mask, its counts and a float64
reference that also gives the log-sum-exp a backward pass needs.

Layout: q and the output (batch, heads, seq_q, head_dim); k and v (batch, kv_heads, seq_k, head_dim);
q head h reads kv head h // (heads // kv_heads), as FlashAttention 2 and torch's ``enable_gqa`` do.
lse (batch, heads, seq_q), fp32, is ln(sum_j exp(s_ij)) over the kept keys of row i.

The mask keeps key j for query i when all of these hold (d = j - i - (seq_k - seq_q): the diagonal is
aligned bottom-right when seq_q != seq_k, as in FlashAttention 2):
- causal: d <= 0;
- window (left, right): -left <= d <= right;
- block mask: ``block_mask[i // bq][j // bk]`` with ``block_size = (bq, bk)``.
A row that keeps no key (causal with seq_q > seq_k, or an empty block-mask row) has output 0 and
lse = -inf.

Serving (issue 33) adds two things, each optional:
- ``seq_lens``: batch entry b holds ``seq_lens[b]`` keys (0 to seq_k), read at run time from an int32 input
  ``seq_lens`` (batch,); the entry's keys past its length do not exist, and its diagonal is aligned at its
  own length (d = j - i - (seq_lens[b] - seq_q)), as FlashAttention's ``seqused_k`` does. The field's values
  are the lengths ``random_inputs`` draws; the reference reads the input's, so a kernel (which reads the
  input) is checked on what it was given.
- ``page_size``: K and V live in a pool of ``pages`` pages of ``page_size`` keys, laid out (pages, page_size,
  kv_heads, head_dim) as vLLM's and FlashAttention's paged caches (NHD), and an int32 ``block_table``
  (batch, ceil(seq_k / page_size)) names entry b's j-th page: key t of entry b is row t % page_size of page
  ``block_table[b, t // page_size]``. Entries past an entry's last used page are never read (random inputs
  set them to -1); a used entry outside [0, pages) is refused by ``check_serving_inputs`` before any launch.
- ``packed`` (with ``seq_lens``): variable-length prefill, FlashAttention's varlen convention: the entries'
  tokens one after another, q (total, heads, head_dim), k and v (total, kv_heads, head_dim), O likewise, lse
  (heads, total), an int32 input ``cu_seqlens`` (batch + 1) of offsets; entry b's queries and keys are rows
  [cu[b], cu[b + 1]), seq_q = seq_k the longest an entry may be.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from tracea.doctor.errors import BadInputError

from .. import attention_serving as serving
from .. import fields
from ..attention_masks import check_block_mask
from ..attention_serving import INDEX_INPUTS, SERVING_FIELDS
from ..dtypes import DType, parse_dtype, to_float64
from ..op import Op, register

MAX_HEAD_DIM = 256
KERNEL_HEAD_DIMS = tuple(range(32, 257, 8))  # the CUDA prefill kernels' head dims (the CPU's: any multiple of 8)
REFERENCE_CHUNK_BYTES = 32 * 2**20  # the float64 score block the reference holds at once


def _block_size(value: Any) -> tuple[int, int]:
    return fields.pair("block_size", value, fields.positive, "(q block, k block)")


def _window(value: Any) -> tuple[int, int] | None:
    return None if value is None else fields.pair("window", value, fields.non_negative, "(left, right) key counts")


@register
@dataclass(frozen=True)
class Attention(Op):
    """Scaled dot-product attention, forward (see the module docstring for the layout and the mask).
    ``kv_heads`` defaults to ``heads``, ``seq_k`` to ``seq_q``, ``scale`` to 1/sqrt(head_dim)."""

    batch: int
    heads: int
    seq_q: int
    head_dim: int
    seq_k: int | None = None
    kv_heads: int | None = None
    dtype: DType = DType.FP32
    causal: bool = False
    scale: float | None = None
    window: tuple[int, int] | None = None
    block_mask: tuple[str, ...] | None = None
    block_size: tuple[int, int] = (128, 128)
    seq_lens: tuple[int, ...] | None = None
    page_size: int | None = None
    pages: int | None = None
    packed: bool = False
    kind: ClassVar[str] = "attention"
    phase: ClassVar[str] = "mma"
    default_shape: ClassVar[dict[str, Any]] = {"batch": 4, "heads": 32, "seq_q": 4096, "head_dim": 128}  # issue 17's headline
    aliases: ClassVar[tuple[str, ...]] = ("flash_attention_2", "flash-attention-2", "flash_attention")  # the design documents'
    order: ClassVar[int] = 40

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "seq_q"):
            object.__setattr__(self, name, fields.positive(name, getattr(self, name)))
        object.__setattr__(self, "seq_k", self.seq_q if self.seq_k is None else fields.positive("seq_k", self.seq_k))
        kv = self.heads if self.kv_heads is None else fields.positive("kv_heads", self.kv_heads)
        if self.heads % kv:
            raise BadInputError(f"kv_heads: heads={self.heads} is not divisible by kv_heads={kv}")
        object.__setattr__(self, "kv_heads", kv)
        d = fields.positive("head_dim", self.head_dim)
        if d % 8 or d > MAX_HEAD_DIM:
            raise BadInputError(f"head_dim: expected a multiple of 8 up to {MAX_HEAD_DIM} (the CUDA kernels take "
                                f"those from {KERNEL_HEAD_DIMS[0]}), got {d}")
        object.__setattr__(self, "head_dim", d)
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        if not isinstance(self.causal, (bool, np.bool_)):
            raise BadInputError(f"causal: expected true or false, got {self.causal!r}")
        object.__setattr__(self, "causal", bool(self.causal))
        scale = 1.0 / math.sqrt(d) if self.scale is None else self.scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.number)) or not math.isfinite(scale) \
                or scale <= 0:
            raise BadInputError(f"scale: expected a positive finite number, got {self.scale!r}")
        object.__setattr__(self, "scale", float(scale))
        object.__setattr__(self, "window", _window(self.window))
        object.__setattr__(self, "block_size", _block_size(self.block_size))
        if self.block_mask is not None:
            object.__setattr__(self, "block_mask", check_block_mask(self.block_mask, self.seq_q, self.seq_k,
                                                                    self.block_size))
        fields.elements("q (batch x heads x seq_q x head_dim)", self.batch, self.heads, self.seq_q, d)
        fields.elements("k (batch x kv_heads x seq_k x head_dim)", self.batch, kv, self.seq_k, d)
        fields.elements("scores per head (seq_q x seq_k)", self.seq_q, self.seq_k)
        self._check_serving()

    def _check_serving(self) -> None:
        """seq_lens, page_size, pages and packed (kernels/attention_serving.py ``check_fields``)."""
        for name, value in serving.check_fields(self).items():
            object.__setattr__(self, name, value)

    # ---- serving: lengths and pages ----------------------------------------------------------------------

    @property
    def table_cols(self) -> int:
        """The block table's columns: the pages an entry of seq_k keys takes (0 without paging)."""
        return -(-self.seq_k // self.page_size) if self.page_size else 0  # type: ignore[operator]

    @property
    def key_lens(self) -> tuple[int, ...]:
        """Each batch entry's key count: seq_lens, or seq_k for every entry."""
        return self.seq_lens if self.seq_lens is not None else (self.seq_k,) * self.batch  # type: ignore[return-value]

    @property
    def serving(self) -> bool:
        """Whether the op takes per-entry lengths, a paged pool or packed entries (inputs beyond q, k, v)."""
        return self.seq_lens is not None or self.page_size is not None or self.packed

    @property
    def query_lens(self) -> tuple[int, ...]:
        """Each batch entry's query count: its length where the entries are packed, else seq_q."""
        return self.key_lens if self.packed else (self.seq_q,) * self.batch

    def entry(self, seq_k: int) -> Attention | None:
        """One batch entry holding ``seq_k`` keys (and as many queries, packed) as a plain op (batch 1,
        contiguous K and V, no lengths): its mask, tiles and pairs are the entry's. None for no keys."""
        if seq_k == 0:
            return None
        return dataclasses.replace(self, batch=1, seq_k=seq_k, seq_lens=None, page_size=None, pages=None,
                                   packed=False, seq_q=seq_k if self.packed else self.seq_q)

    def _entries(self) -> list[tuple[Attention | None, int]]:
        """(entry op, how many batch entries share its length), one per distinct length."""
        counts: dict[int, int] = {}
        for n in self.key_lens:
            counts[n] = counts.get(n, 0) + 1
        return [(self.entry(n), c) for n, c in sorted(counts.items())]

    # ---- the mask --------------------------------------------------------------------------------------

    def grid(self, block: tuple[int, int] | None = None) -> tuple[int, int]:
        """(q blocks, k blocks) at ``block`` (default ``block_size``)."""
        bq, bk = block or self.block_size
        return -(-self.seq_q // bq), -(-self.seq_k // bk)

    def _bounds(self) -> tuple[int, int]:
        """(left, right): key offsets kept around the aligned diagonal; "unbounded" is seq_q + seq_k."""
        far = self.seq_q + self.seq_k
        left, right = self.window if self.window is not None else (far, far)
        return left, (min(right, 0) if self.causal else right)

    def _key_ranges(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query row, the kept keys before the block mask: [lo, hi) within [0, seq_k)."""
        left, right = self._bounds()
        diag = rows.astype(np.int64) + (self.seq_k - self.seq_q)
        lo = np.clip(diag - left, 0, self.seq_k)
        hi = np.clip(diag + right + 1, 0, self.seq_k)
        return np.minimum(lo, hi), hi

    def block_mask_array(self) -> np.ndarray | None:
        if self.block_mask is None:
            return None
        return np.array([[c == "1" for c in row] for row in self.block_mask], dtype=bool)

    def keep_mask(self, r0: int, r1: int, c0: int = 0, c1: int | None = None) -> np.ndarray:
        """The boolean mask of query rows r0..r1-1 and keys c0..c1-1 (default: all keys)."""
        rows = np.arange(r0, r1)
        lo, hi = self._key_ranges(rows)
        cols = np.arange(c0, self.seq_k if c1 is None else c1)
        keep = (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])
        bm = self.block_mask_array()
        if bm is not None:
            keep &= bm[np.ix_(rows // self.block_size[0], cols // self.block_size[1])]
        return keep

    @cached_property
    def kept_pairs(self) -> int:
        """(query, key) pairs the mask keeps in one head: exact, element by element (a block mask keeps
        whole tiles, so its pairs come tile by tile; a causal or window edge cuts tiles)."""
        bm = self.block_mask_array()
        bq, bk = self.block_size
        if bm is not None:  # kept keys in [0, x) for q block a: whole kept blocks, plus part of x's block
            bm = np.concatenate([bm, np.zeros((bm.shape[0], 1), bool)], axis=1).astype(np.int64)
            cum = np.concatenate([np.zeros((bm.shape[0], 1), np.int64), np.cumsum(bm, axis=1)], axis=1)
        total, step = 0, 1 << 20
        for r0 in range(0, self.seq_q, step):
            rows = np.arange(r0, min(r0 + step, self.seq_q))
            lo, hi = self._key_ranges(rows)
            if bm is None:
                total += int((hi - lo).sum())
                continue
            a = rows // bq

            def upto(x: np.ndarray, a: np.ndarray = a) -> np.ndarray:
                return cum[a, x // bk] * bk + bm[a, x // bk] * (x % bk)

            total += int((upto(hi) - upto(lo)).sum())
        return total

    def tile_counts(self, block: tuple[int, int] | None = None) -> tuple[int, int]:
        """(tiles in all, tiles a kernel computes) over batch x heads at ``block`` = (bq, bk) (default
        ``block_size``); a tile is computed when the mask keeps a pair in it. With a block mask the tiles
        are its blocks."""
        block = self.block_size if block is None else _block_size(block)
        if self.serving:  # each entry's own tiles at its length, over the capacity's grid
            nq, nk = self.grid(block)
            kept = sum(c * e.tile_counts(block)[1] for e, c in self._entries() if e is not None)
            return self.batch * self.heads * nq * nk, kept
        if self.block_mask is not None and block != self.block_size:
            raise BadInputError(f"block: a block mask tiles by its block_size {self.block_size}, got {block}")
        bq, bk = block
        nq, nk = self.grid(block)
        starts = np.arange(nq) * bq
        lo, _ = self._key_ranges(starts)  # the union of a q block's key ranges runs from its first row's
        _, hi = self._key_ranges(np.minimum(starts + bq, self.seq_q) - 1)  # lo to its last row's hi
        live = lo < hi
        bm = self.block_mask_array()
        if bm is None:  # a q block's kept keys are one range, so its tiles are a run of k blocks: O(q blocks)
            kept = int(np.where(live, (hi - 1) // bk - lo // bk + 1, 0).sum())
        else:  # the map itself is q blocks x k blocks, so testing each tile costs no more than reading it
            c0 = np.arange(nk) * bk
            c1 = np.minimum(c0 + bk, self.seq_k)
            overlap = np.maximum(lo[:, None], c0[None, :]) < np.minimum(hi[:, None], c1[None, :])
            kept = int((overlap & live[:, None] & bm).sum())
        heads = self.batch * self.heads
        return heads * nq * nk, heads * kept

    @property
    def tiles_total(self) -> int:
        return self.tile_counts()[0]

    @property
    def tiles_computed(self) -> int:
        return self.tile_counts()[1]

    # ---- counts, shapes, inputs --------------------------------------------------------------------------

    @cached_property
    def pairs_computed(self) -> int:
        """(query, key) pairs kept over the batch entries, in one head (each entry at its own length)."""
        if not self.serving:
            return self.batch * self.kept_pairs
        return sum(c * e.kept_pairs for e, c in self._entries() if e is not None)

    @property
    def flops(self) -> int:
        """The two matrix products over the kept pairs only (2 FLOP a multiply-add each, QK^T and PV);
        the softmax's exponentials are not counted, as FlashAttention reports."""
        return 4 * self.heads * self.head_dim * self.pairs_computed

    @property
    def bytes(self) -> int:
        """Q read once, each entry's keys of K and V read once, O written once, lse (fp32) written once; the
        block table's used entries and the lengths (int32) where there are."""
        rows = sum(self.query_lens) * self.heads
        kv = sum(self.key_lens) * self.kv_heads * self.head_dim  # type: ignore[operator]
        extra = 4 * (sum(-(-n // self.page_size) for n in self.key_lens) if self.page_size else 0) \
            + 4 * (self.batch + self.packed if self.seq_lens is not None else 0)
        return (2 * rows * self.head_dim + 2 * kv) * self.dtype.itemsize + 4 * rows + extra

    @property
    def density(self) -> float:
        """The fraction of the seq_q x seq_k pairs (each entry's seq_k: its capacity) the mask keeps."""
        return self.pairs_computed / (self.batch * self.seq_q * self.seq_k)  # type: ignore[operator]

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The inputs: q, k and v, then the block table (paged) and the lengths (seq_lens; packed: the
        entries' offsets, cu_seqlens), int32."""
        if self.packed:
            total = sum(self.key_lens)
            kv = (total, self.kv_heads, self.head_dim)
            return {"q": (total, self.heads, self.head_dim), "k": kv, "v": kv, "cu_seqlens": (self.batch + 1,)}
        if self.page_size:
            kv = (self.pages, self.page_size, self.kv_heads, self.head_dim)
        else:
            kv = (self.batch, self.kv_heads, self.seq_k, self.head_dim)
        out = {"q": (self.batch, self.heads, self.seq_q, self.head_dim), "k": kv, "v": kv}
        if self.page_size:
            out["block_table"] = (self.batch, self.table_cols)
        if self.seq_lens is not None:
            out["seq_lens"] = (self.batch,)
        return out  # type: ignore[return-value]

    def input_dtype(self, name: str) -> np.dtype:
        """An input's storage dtype: the op's, int32 for the block table and the lengths."""
        return np.dtype(np.int32) if name in INDEX_INPUTS else self.dtype.storage

    def c_reference(self, epilogue: Mapping[str, str]) -> str | None:
        if self.serving:  # lengths and pages: an exported package's example does not gather them
            return None
        far = self.seq_q + self.seq_k  # the IR's key range around the bottom-right aligned diagonal
        left, right = self.window if self.window is not None else (far, far)
        right = min(right, 0) if self.causal else right
        return f"""enum {{ NB = {self.batch}, HQ = {self.heads}, HK = {self.kv_heads}, SQ = {self.seq_q}, SK = {self.seq_k}, D = {self.head_dim} }};
    static double s[SK];
    for (long b = 0; b < NB; ++b)
        for (long h = 0; h < HQ; ++h)
            for (long i = 0; i < SQ; ++i) {{
                const double* qi = q + ((b * HQ + h) * SQ + i) * D;
                const long kvh = h / (HQ / HK), diag = i + (SK - SQ);
                long lo = diag - {left}, hi = diag + {right} + 1;
                lo = lo < 0 ? 0 : lo > SK ? SK : lo;
                hi = hi < 0 ? 0 : hi > SK ? SK : hi;
                double* o = ref + ((b * HQ + h) * SQ + i) * D;
                for (long d = 0; d < D; ++d) o[d] = 0;
                if (lo >= hi) continue;  /* no key kept: a zero row, as the IR's reference */
                double mx = -INFINITY, sum = 0;
                for (long j = lo; j < hi; ++j) {{
                    const double* kj = k + ((b * HK + kvh) * SK + j) * D;
                    double dot = 0;
                    for (long d = 0; d < D; ++d) dot += qi[d] * kj[d];
                    s[j] = dot * {self.scale!r};
                    mx = s[j] > mx ? s[j] : mx;
                }}
                for (long j = lo; j < hi; ++j) {{
                    const double p = exp(s[j] - mx), *vj = v + ((b * HK + kvh) * SK + j) * D;
                    sum += p;
                    for (long d = 0; d < D; ++d) o[d] += p * vj[d];
                }}
                for (long d = 0; d < D; ++d) o[d] /= sum;
            }}"""

    def output_shape(self) -> tuple[int, ...]:
        """O: q's layout ((batch, heads, seq_q, head_dim), or packed (total, heads, head_dim))."""
        if self.packed:
            return (sum(self.key_lens), self.heads, self.head_dim)
        return (self.batch, self.heads, self.seq_q, self.head_dim)

    def lse_shape(self) -> tuple[int, ...]:
        """lse: (batch, heads, seq_q), or packed (heads, total) as FlashAttention's varlen forward has it."""
        if self.packed:
            return (self.heads, sum(self.key_lens))
        return (self.batch, self.heads, self.seq_q)

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Unit normals for q, k and v (q.k * 1/sqrt(head_dim) has unit variance, so the softmax is neither flat
        nor one-hot); a paged pool's pages dealt to the entries in a random order (so a kernel cannot rely on
        their order), the table's unused entries -1; the lengths of ``seq_lens``."""
        shapes = self.shapes()
        out = {name: fields.random(rng, shapes[name], self.dtype) for name in ("q", "k", "v")}
        return {**out, **serving.random_index_inputs(self, rng)}

    def check_serving_inputs(self, inputs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
        """(lengths, block table) of ``inputs`` as int64 arrays, checked as every kernel must have them
        (kernels/attention_serving.py ``check_inputs``): one ``BadInputError`` naming the first fault."""
        return serving.check_inputs(self, inputs)

    def gather_kv(self, inputs: Mapping[str, Any], b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Entry b's first ``n`` keys of K and V as (kv_heads, n, head_dim) arrays, through its pages."""
        return serving.gather_kv(self, inputs, b, n)

    def to_json(self) -> dict[str, Any]:
        """As the other ops, the serving fields only where they are set (records before them read the same)."""
        d = super().to_json()
        for name in SERVING_FIELDS:
            if d.get(name) in (None, False):
                d.pop(name, None)
        return d

    @property
    def signature(self) -> str:
        """As the other ops, with a block mask as its digest (the full map is in to_json), long lengths as
        theirs, and the serving fields only where they are set."""
        sig = super().signature
        for name in SERVING_FIELDS:  # absent, as before they existed: older databases' keys still match
            if getattr(self, name) in (None, False):
                sig = sig.replace(f",{name}={getattr(self, name)}", "")
        if self.seq_lens is not None and len(self.seq_lens) > 8:
            digest = hashlib.sha256(",".join(map(str, self.seq_lens)).encode()).hexdigest()[:16]
            sig = sig.replace(f"seq_lens={self.seq_lens}", f"seq_lens=sha256:{digest}")
        if self.block_mask is None:
            return sig
        digest = hashlib.sha256("/".join(self.block_mask).encode()).hexdigest()[:16]
        return sig.replace(f"block_mask={self.block_mask}", f"block_mask=sha256:{digest}")

    # ---- the reference -----------------------------------------------------------------------------------

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self.reference_with_lse(inputs)[0]

    def reference_lse(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self.reference_with_lse(inputs)[1]

    def reference_with_lse(self, inputs: dict[str, np.ndarray],
                           chunk_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(output, lse) in float64, the softmax stabilised by each row's max. Query rows go in chunks of
        ``chunk_rows`` (default: a float64 score block of about 32 MiB), so a long sequence never holds
        seq_q x seq_k scores at once."""
        if self.serving:
            return serving.reference(self, inputs, chunk_rows)
        q = to_float64(inputs["q"], self.dtype)
        k = to_float64(inputs["k"], self.dtype)
        v = to_float64(inputs["v"], self.dtype)
        out = np.zeros(self.output_shape())
        lse = np.full(self.lse_shape(), -np.inf)
        rows = chunk_rows or max(1, REFERENCE_CHUNK_BYTES // (8 * self.seq_k))  # type: ignore[operator]
        group = self.heads // self.kv_heads  # type: ignore[operator]
        for r0 in range(0, self.seq_q, rows):
            r1 = min(r0 + rows, self.seq_q)
            lo, hi = self._key_ranges(np.arange(r0, r1))
            c0, c1 = int(lo.min()), int(hi.max())  # only the keys some row keeps (a window's band)
            keep = self.keep_mask(r0, r1, c0, c1)
            live = keep.any(axis=1)
            if not live.any():
                continue
            masked = None if keep.all() else ~keep
            for b in range(self.batch):
                for h in range(self.heads):
                    s = q[b, h, r0:r1] @ k[b, h // group, c0:c1].T  # in place from here: one score block
                    s *= self.scale
                    if masked is not None:
                        np.putmask(s, masked, -np.inf)
                    m = np.where(live, s.max(axis=1), 0.0)
                    s -= m[:, None]
                    np.exp(s, out=s)
                    safe = np.where(live, s.sum(axis=1), 1.0)
                    out[b, h, r0:r1] = (s @ v[b, h // group, c0:c1]) / safe[:, None]
                    lse[b, h, r0:r1] = np.where(live, m + np.log(safe), -np.inf)
        return out, lse

def lse_error(lse: np.ndarray, ref: np.ndarray) -> float:
    """The largest absolute difference of a kernel's lse from the reference's; infinite when the shapes,
    or the rows that keep no key (-inf), differ, or a value is NaN."""
    lse = np.asarray(lse, dtype=np.float64)
    if lse.shape != ref.shape or np.isnan(lse).any():
        return math.inf
    empty = np.isneginf(ref)
    if not np.array_equal(np.isneginf(lse), empty) or not np.isfinite(lse[~empty]).all():
        return math.inf
    return float(np.abs(lse[~empty] - ref[~empty]).max(initial=0.0))


LSE_TOLERANCE = 1e-3  # absolute: lse comes from fp32 accumulators of products of exact 16-bit inputs

__all__ = ["Attention", "check_block_mask", "lse_error", "LSE_TOLERANCE", "KERNEL_HEAD_DIMS", "INDEX_INPUTS"]
