"""``tracea.ops.attention``: its arguments checked, its IR value, its vendor fallback (``fallback``, over the
mask of kernels/ops/attention.py as a boolean array: ``keep_mask``)."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from .._arrays import describe, is_torch, overlapping, shown
from .._checks import finite, ir, pair
from .._dispatch import prepared, run
from .._engine import Fallback
from .._prepared import MISS, RETRY, Uncached, array_key, mask_key, opt, out_key
from .._vendor import back, f64

ORDER = 40  # its place in tracea.ops (help, __all__)
__all__ = ["attention"]
# its PyTorch pieces (in _torch/attention.py, which imports torch), offered by tracea.ops where torch is installed
TORCH_PIECES: tuple[str, ...] = ()


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              window: Any = None, block_mask: Any = None, block_size: Any = (128, 128), out: Any = None,
              block_table: Any = None, seq_lens: Any = None, check_tables: bool = True, cu_seqlens: Any = None,
              max_seqlen: int | None = None) -> Any:
    """softmax(q k^T * scale + mask) v in the Attention op's layout: q (B, H, Sq, D), k and v (B, Hkv, Sk, D),
    q head h reading kv head h // (H / Hkv) (grouped-query). The mask (kernels/ops/attention.py): causal with the
    diagonal aligned bottom-right, ``window`` = (left, right) keys, ``block_mask`` (Sq/bq x Sk/bk booleans, a
    NumPy array or tensor) over ``block_size`` tiles. A row that keeps no key is 0.

    Serving: ``seq_lens`` (int32, (B,)) gives each batch entry's key count (its diagonal aligned at its own
    length); ``block_table`` (int32, (B, pages an entry may use)) makes k and v a paged cache of shape (pages,
    page_size, Hkv, D), key t of entry b in page ``block_table[b, t // page_size]`` (entries past an entry's
    last page are not read). Both arrays are checked before the launch (``check_tables``: on CUDA they are
    copied to the host for it, a wait for the device; skipped inside a CUDA graph capture, where nothing may
    wait); unchecked, a kernel still clamps every length and page into the cache, so it never reads memory
    outside it.

    Variable-length prefill: ``cu_seqlens`` (int32, (B + 1,)) packs the entries' tokens one after another, as
    FlashAttention's varlen forward: q (total, H, D), k and v (total, Hkv, D), the result (total, H, D); entry b
    is rows [cu_seqlens[b], cu_seqlens[b + 1]) of each, its queries attending to its own keys (causal aligned
    within the entry). ``max_seqlen``: the longest an entry may be (default: total), part of the plan."""
    try:
        key = ("attention", array_key(q), array_key(k), array_key(v), opt(causal), opt(scale), opt(window),
               mask_key(block_mask), opt(block_size), None if out is None else out_key(out),
               array_key(block_table), array_key(seq_lens), array_key(cu_seqlens), opt(max_seqlen))
    except Uncached:
        key = None
    if not isinstance(check_tables, (bool, np.bool_)):
        raise BadInputError(f"attention: check_tables expected True or False, got {shown(check_tables)}")
    if max_seqlen is not None and cu_seqlens is None:
        raise BadInputError("attention: max_seqlen bounds packed entries; it needs cu_seqlens")
    if cu_seqlens is not None or block_table is not None or seq_lens is not None:
        _index_call(q, k, v, out, (block_table, seq_lens, cu_seqlens))
    if cu_seqlens is not None:
        _packed_args(q, k, v, cu_seqlens, max_seqlen, block_table, seq_lens, check_tables)
        y = prepared(key, (q, k, v, cu_seqlens), out)
    elif block_table is None and seq_lens is None:
        y = prepared(key, (q, k, v), out)
    else:
        _serving_args(q, k, v, block_table, seq_lens, check_tables)
        y = prepared(key, (q, k, v, block_table, seq_lens), out)
    if y is MISS or y is RETRY:
        if cu_seqlens is not None:
            return _packed(q, k, v, causal, scale, window, block_mask, out, key if y is MISS else None, cu_seqlens,
                           max_seqlen)
        return _attention(q, k, v, causal, scale, window, block_mask, block_size, out, key if y is MISS else None,
                          block_table, seq_lens)
    return y


def _index_call(q: Any, k: Any, v: Any, out: Any, index: tuple[Any, ...]) -> None:
    """What a call with index arrays needs before its shapes are read: q, k and v arrays or tensors, and a given
    ``out`` apart from the index arrays too (the kernel would write what it reads)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        describe(name, x)  # a list or another type: the one error every op function gives
    if out is not None:
        for name, x in zip(("block_table", "seq_lens", "cu_seqlens"), index, strict=True):
            if x is not None and overlapping(out, x):
                raise BadInputError(f"out: overlaps the input {name!r}; the kernel would read what it writes",
                                    "give out= a buffer of its own")


def _index_array(name: str, x: Any, q: Any) -> None:
    """An int32 index array of a call: NumPy or a tensor where q is, contiguous."""
    if not (isinstance(x, np.ndarray) or is_torch(x)) or str(x.dtype) not in ("int32", "torch.int32"):
        what = f"{x.dtype}" if hasattr(x, "dtype") else type(x).__name__
        raise BadInputError(f"attention: {name} expected an int32 array or tensor, got {what}",
                            f"e.g. {name}.to(torch.int32) or numpy.asarray({name}, numpy.int32)")
    if is_torch(q) != is_torch(x) or (is_torch(x) and x.device != q.device):
        raise BadInputError(f"attention: {name} must be where q is ({getattr(q, 'device', 'NumPy')}), got "
                            f"{getattr(x, 'device', 'a NumPy array')}")
    if not (x.is_contiguous() if is_torch(x) else x.flags.c_contiguous):
        raise BadInputError(f"attention: {name} must be contiguous", f"pass {name}.contiguous()")


def _packed_args(q: Any, k: Any, v: Any, cu: Any, max_seqlen: Any, block_table: Any, seq_lens: Any,
                 check: bool) -> None:
    """A packed call's offsets and shapes, then (``check``) the offsets' values: from 0, never decreasing, to
    the tokens q holds, no entry past ``max_seqlen``. One BadInputError naming the first fault."""
    if block_table is not None or seq_lens is not None:
        raise BadInputError("attention: cu_seqlens (packed entries) does not combine with block_table or seq_lens")
    _index_array("cu_seqlens", cu, q)
    qs, ks = tuple(q.shape), tuple(k.shape)
    if len(cu.shape) != 1 or cu.shape[0] < 2:
        raise BadInputError(f"attention: cu_seqlens {tuple(cu.shape)}: expected (B + 1,) offsets, B >= 1")
    if len(qs) != 3 or len(ks) != 3 or tuple(v.shape) != ks or ks[0] != qs[0] or ks[2] != qs[2] or ks[1] == 0 \
            or qs[1] % ks[1]:
        raise BadInputError(f"attention: q {qs}, k {ks}, v {tuple(v.shape)}: packed entries take q (total, H, D) and "
                            "k, v (total, Hkv, D) with H a multiple of Hkv")
    total = qs[0]
    cap = max(total, 1) if max_seqlen is None else max_seqlen
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap <= 0:
        raise BadInputError(f"attention: max_seqlen expected a positive integer (the longest an entry may be), got "
                            f"{shown(max_seqlen)}")
    if not check or (is_torch(q) and q.device.type == "cuda" and sys.modules["torch"].cuda.is_current_stream_capturing()):
        return
    from tracea.kernels.attention_serving import check_offsets

    check_offsets(_host_ints(cu), total, cap, "max_seqlen", "attention: ")


def _serving_args(q: Any, k: Any, v: Any, block_table: Any, seq_lens: Any, check: bool) -> None:
    """The block table and the lengths of a serving call: their type, dtype, shape and device, then (``check``)
    their values, before any launch: every length within what k (or the table's pages) holds, every table
    entry an entry reads inside the cache. One BadInputError naming the first fault."""
    for name, x in (("block_table", block_table), ("seq_lens", seq_lens)):
        if x is not None:
            _index_array(name, x, q)
    qs, ks = tuple(q.shape), tuple(k.shape)
    if len(qs) != 4 or len(ks) != 4 or tuple(v.shape) != ks:
        raise BadInputError(f"attention: q {qs}, k {ks}, v {tuple(v.shape)}: expected q (B, H, Sq, D) and k, v " + (
            "(pages, page_size, Hkv, D) with a block_table" if block_table is not None else "(B, Hkv, Sk, D)"))
    batch = qs[0]
    if block_table is not None:
        if len(block_table.shape) != 2 or block_table.shape[0] != batch or block_table.shape[1] == 0:
            raise BadInputError(f"attention: block_table {tuple(block_table.shape)}: expected (B={batch}, pages an "
                                "entry may use), at least one column")
        pages, page = ks[0], ks[1]
        if pages == 0 or page == 0:
            raise BadInputError(f"attention: k {ks}: a paged cache of no pages, or pages of no keys")
        capacity = block_table.shape[1] * page
    else:
        if ks[0] != batch:
            raise BadInputError(f"attention: q {qs}, k {ks}: k and v hold {ks[0]} batch entries, q {batch}",
                                "k and v are (B, Hkv, Sk, D) with q's B")
        pages = page = 0
        capacity = ks[2]
    if seq_lens is not None and tuple(seq_lens.shape) != (batch,):
        raise BadInputError(f"attention: seq_lens {tuple(seq_lens.shape)}: expected one length per batch entry "
                            f"({batch},)")
    if check and not (is_torch(q) and q.device.type == "cuda" and sys.modules["torch"].cuda.is_current_stream_capturing()):
        _serving_values(block_table, seq_lens, batch, capacity, page, pages)  # (a capture cannot wait: the kernel clamps)


def _serving_values(block_table: Any, seq_lens: Any, batch: int, capacity: int, page: int, pages: int) -> None:
    """Every length within ``capacity``, every table entry an entry reads inside the cache's ``pages``."""
    # On a GPU the two arrays come to the host (a copy of each, the call's one wait; a check of several device
    # ops cost 100-150 us a call on an H200, docs/benchmarks.md "Paged decode") and are checked there.
    from tracea.kernels.attention_serving import check_lengths, check_table

    lens = np.full(batch, capacity, np.int64) if seq_lens is None else _host_ints(seq_lens)
    check_lengths(lens, capacity, f"the block table's {block_table.shape[1]} pages of {page} keys"
                  if block_table is not None else "k's sequence length", "attention: ")
    if block_table is not None:
        check_table(_host_ints(block_table), lens, page, pages, "attention: ")


def _host_ints(x: Any) -> np.ndarray:
    """An int32 array or tensor as host int64 values (a tensor on a GPU copied over)."""
    return np.asarray(x.cpu() if is_torch(x) else x).astype(np.int64)


def _attention(q: Any, k: Any, v: Any, causal: Any, scale: Any, window: Any, block_mask: Any, block_size: Any,
               out: Any, key: tuple[Any, ...] | None, block_table: Any = None, seq_lens: Any = None) -> Any:
    args = {"q": describe("q", q), "k": describe("k", k), "v": describe("v", v)}
    qs, ks, vs = args["q"].shape, args["k"].shape, args["v"].shape
    if block_table is not None or seq_lens is not None:
        return _serving(q, k, v, args, causal, scale, window, block_mask, out, key, block_table, seq_lens)
    if len(qs) != 4 or ks != vs or len(ks) != 4 or qs[0] != ks[0] or qs[3] != ks[3] or (
            ks[1] == 0 and qs[1] > 0) or qs[1] % max(ks[1], 1):
        raise BadInputError(f"attention: q {qs}, k {ks}, v {vs}: expected q (B, H, Sq, D) and k, v (B, Hkv, Sk, D) "
                            "with H a multiple of Hkv", "the layout is (batch, heads, seq, head_dim): "
                            "a (B, S, H, D) tensor takes .transpose(1, 2).contiguous()")
    b_, h, sq, d = qs
    hkv, sk = ks[1], ks[2]
    if sk == 0 and sq > 0:
        raise BadInputError("attention: k and v hold no keys (Sk = 0): every query row's softmax is over nothing",
                            "give at least one key")
    sc, win = _options(causal, scale, window, d)
    bsize = pair("block_size", block_size)
    mask = None
    if block_mask is not None:  # checked here, not only by the op: a fallback reads it too
        from tracea.kernels.ops.attention import check_block_mask

        given = block_mask.detach().cpu().numpy() if is_torch(block_mask) else block_mask
        mask = check_block_mask(given, sq, sk, bsize)

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Attention

        odd_eights(args["q"], d)
        op = ir(lambda: Attention(batch=b_, heads=h, seq_q=sq, head_dim=d, seq_k=sk, kv_heads=hkv,
                                   dtype=args["q"].dtype, causal=bool(causal), scale=sc, window=win,
                                   block_mask=mask, block_size=bsize))
        return op, {"q": q, "k": k, "v": v}

    def vendor() -> Any:
        bm = None if mask is None else np.array([[c == "1" for c in row] for row in mask], dtype=bool)
        return fallback(q, k, v, sc, (sq, sk, bool(causal), win, bm, bsize))

    names = {"numpy": "NumPy attention in float64", "torch": "torch.nn.functional.scaled_dot_product_attention"}
    return run("attention", args, plan, out, qs, vendor, names, fast=(key, ("q", "k", "v"), (q, k, v)))


def odd_eights(q: Any, d: int) -> None:
    """On CUDA, a head dim of an odd number of 8s runs SDPA: Tracea's kernels compute it over the next multiple of
    16, and on an H200 they ran at 0.69-0.89x SDPA there (d40, d72, d136; docs/benchmarks.md, "Attention head
    dims"), where the multiples of 16 beside them run at 0.93-1.12x. ``tracea bench --head-dim`` still runs them."""
    if q.device == "cuda" and d % 16 and d % 8 == 0:
        raise Fallback(f"head dim {d} (an odd number of 8s): Tracea's CUDA kernels compute it over {d + 8} and ran "
                       "slower than SDPA there (0.69-0.89x on an H200)")


def _options(causal: Any, scale: Any, window: Any, d: int) -> tuple[float, tuple[int, int] | None]:
    """(scale, window) of a call, ``causal`` checked: each a BadInputError naming the argument."""
    if not isinstance(causal, (bool, np.bool_)):
        raise BadInputError(f"attention: causal expected True or False, got {shown(causal)}", "e.g. causal=True")
    sc = finite(scale) if scale is not None else 1.0 / math.sqrt(d) if d else 1.0
    if sc is None or sc <= 0:
        raise BadInputError(f"attention: scale expected a positive finite number, got {shown(scale)}",
                            "leave it out for 1/sqrt(head_dim)")
    return sc, None if window is None else pair("window", window, low=0)


def _serving(q: Any, k: Any, v: Any, args: dict[str, Any], causal: Any, scale: Any, window: Any, block_mask: Any,
             out: Any, key: tuple[Any, ...] | None, block_table: Any, seq_lens: Any) -> Any:
    """A call with lengths or a paged cache (its arrays already checked by ``_serving_args``): planned as the op
    whose every entry holds the capacity (the lengths are read by the kernel at each call, so the plan and its
    prepared launch serve every call of these shapes)."""
    qs, ks = args["q"].shape, args["k"].shape
    b_, h, sq, d = qs
    paged = block_table is not None
    hkv = ks[2] if paged else ks[1]
    if ks[3] != d or hkv == 0 or h % hkv:
        raise BadInputError(f"attention: q {qs}, k {ks}: expected the same head dim and H a multiple of Hkv",
                            "a paged cache is (pages, page_size, Hkv, D)" if paged else "k is (B, Hkv, Sk, D)")
    if block_mask is not None:
        raise BadInputError("attention: a block_mask does not combine with seq_lens or a block_table",
                            "use causal or window")
    sc, win = _options(causal, scale, window, d)
    page = ks[1] if paged else None
    capacity = block_table.shape[1] * ks[1] if paged else ks[2]

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Attention

        op = ir(lambda: Attention(batch=b_, heads=h, seq_q=sq, head_dim=d, seq_k=capacity, kv_heads=hkv,
                                   dtype=args["q"].dtype, causal=bool(causal), scale=sc, window=win,
                                   seq_lens=None if seq_lens is None else (capacity,) * b_, page_size=page,
                                   pages=ks[0] if paged else None))
        feeds = {"q": q, "k": k, "v": v}
        feeds.update({n: x for n, x in (("block_table", block_table), ("seq_lens", seq_lens)) if x is not None})
        return op, feeds

    def vendor() -> Any:
        return serving_fallback(q, k, v, sc, bool(causal), win, block_table, seq_lens)

    names = {"numpy": "NumPy attention in float64, entry by entry", "torch": "scaled_dot_product_attention, entry by entry"}
    arrays = (q, k, v, block_table, seq_lens)
    return run("attention", args, plan, out, qs, vendor, names,
               fast=(key, ("q", "k", "v", "block_table", "seq_lens"), arrays))


def _packed(q: Any, k: Any, v: Any, causal: Any, scale: Any, window: Any, block_mask: Any, out: Any,
            key: tuple[Any, ...] | None, cu: Any, max_seqlen: int | None) -> Any:
    """A packed call (its arrays checked by ``_packed_args``), planned for entries of up to ``max_seqlen``
    tokens (default: all of them); the kernel reads the offsets at each call."""
    args = {"q": describe("q", q), "k": describe("k", k), "v": describe("v", v)}
    total, h, d = args["q"].shape
    hkv = args["k"].shape[1]
    if block_mask is not None:
        raise BadInputError("attention: a block_mask does not combine with cu_seqlens", "use causal or window")
    sc, win = _options(causal, scale, window, d)
    batch, cap = cu.shape[0] - 1, int(max_seqlen or max(total, 1))
    stand_in = ([cap] * (total // cap) + [total % cap] + [0] * batch)[:batch]  # the plan's lengths: any summing to total

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Attention

        odd_eights(args["q"], d)
        op = ir(lambda: Attention(batch=batch, heads=h, seq_q=cap, head_dim=d, seq_k=cap, kv_heads=hkv,
                                   dtype=args["q"].dtype, causal=bool(causal), scale=sc, window=win,
                                   seq_lens=tuple(stand_in), packed=True))
        return op, {"q": q, "k": k, "v": v, "cu_seqlens": cu}

    def vendor() -> Any:
        return packed_fallback(q, k, v, sc, bool(causal), win, cu)

    names = {"numpy": "NumPy attention in float64, entry by entry", "torch": "scaled_dot_product_attention, entry by entry"}
    return run("attention", args, plan, out, (total, h, d), vendor, names,
               fast=(key, ("q", "k", "v", "cu_seqlens"), (q, k, v, cu)))


def packed_fallback(q: Any, k: Any, v: Any, scale: float, causal: bool, window: tuple[int, int] | None,
                    cu: Any) -> Any:
    """The vendor call of packed entries, entry by entry (its rows of q, k and v as one batch entry); offsets
    clamped into the tokens (a call with ``check_tables=False``), rows no entry holds 0."""
    torch = sys.modules.get("torch") if is_torch(q) else None
    offs = np.clip(_host_ints(cu), 0, q.shape[0]).tolist()
    result = torch.zeros_like(q) if torch else np.zeros_like(q)
    for a, e in zip(offs[:-1], offs[1:], strict=True):
        if e <= a:
            continue
        qb, kb, vb = (x[a:e].swapaxes(0, 1)[None] for x in (q, k, v))
        result[a:e] = fallback(qb, kb, vb, scale, (e - a, e - a, causal, window, None, (128, 128)))[0].swapaxes(0, 1)
    return result


def serving_fallback(q: Any, k: Any, v: Any, scale: float, causal: bool, window: tuple[int, int] | None,
                     block_table: Any, seq_lens: Any) -> Any:
    """The vendor call of a serving call, entry by entry: its keys gathered (through its pages) at its length,
    then ``fallback`` with the entry's own bottom-right diagonal; an entry of no keys is 0. Lengths and pages
    are clamped into the cache as the kernels clamp them (a call with ``check_tables=False``)."""
    from tracea.kernels.attention_serving import page_rows

    torch = sys.modules.get("torch") if is_torch(q) else None
    b_ = q.shape[0]
    page = k.shape[1] if block_table is not None else 0
    table = None if block_table is None else _host_ints(block_table)
    capacity = table.shape[1] * page if table is not None else k.shape[2]
    lens = np.full(b_, capacity) if seq_lens is None else np.clip(_host_ints(seq_lens), 0, capacity)
    flat = None if table is None else (k.reshape(-1, k.shape[2], k.shape[3]), v.reshape(-1, v.shape[2], v.shape[3]))
    outs = []
    for b in range(b_):
        n = int(lens[b])
        if flat is not None:
            rows = page_rows(table[b], n, page, k.shape[0])
            idx = torch.as_tensor(rows, device=q.device) if torch else rows
            kb, vb = (x[idx].swapaxes(0, 1)[None] for x in flat)  # (NumPy's and torch's spelling alike)
        else:
            kb, vb = k[b:b + 1, :, :n], v[b:b + 1, :, :n]
        if n == 0:
            outs.append(torch.zeros_like(q[b:b + 1]) if torch else np.zeros_like(q[b:b + 1]))
            continue
        outs.append(fallback(q[b:b + 1], kb, vb, scale, (q.shape[2], n, causal, window, None, (128, 128))))
    return torch.cat(outs) if torch else np.concatenate(outs)


def keep_mask(seq_q: int, seq_k: int, causal: bool, window: tuple[int, int] | None, block_mask: Any,
              block_size: tuple[int, int], xp: Any = np, device: Any = None) -> Any:
    """kernels/ops/attention.py's mask as a (seq_q, seq_k) boolean array (diagonal aligned bottom-right), or None
    when every pair is kept. ``xp``: numpy, or torch with ``device`` (built there: no host copy)."""
    if not causal and window is None and block_mask is None:
        return None
    kw = {} if xp is np else {"device": device}
    rows, cols = xp.arange(seq_q, **kw)[:, None], xp.arange(seq_k, **kw)[None, :]
    d = cols - rows - (seq_k - seq_q)
    keep = xp.ones((seq_q, seq_k), dtype=xp.bool_ if xp is np else xp.bool, **kw)
    if causal:
        keep = keep & (d <= 0)
    if window is not None:
        keep = keep & (d >= -window[0]) & (d <= window[1])
    if block_mask is not None:
        bm = np.asarray(block_mask, dtype=bool)
        bm = bm if xp is np else xp.as_tensor(bm, device=device)
        keep = keep & bm[rows // block_size[0], cols // block_size[1]]
    return keep


def fallback(q: Any, k: Any, v: Any, scale: float, mask: tuple[Any, ...]) -> Any:
    """O = softmax(q k^T * scale, masked by ``keep_mask(*mask)``) v, q head h on kv head h // (H / Hkv); a
    row that keeps no key is 0 (as the kernels write it)."""
    group = q.shape[1] // k.shape[1]
    if isinstance(q, np.ndarray):
        keep = keep_mask(*mask)
        qf, kf, vf = f64(q), f64(k), f64(v)
        kf, vf = np.repeat(kf, group, axis=1), np.repeat(vf, group, axis=1)
        s = qf @ kf.swapaxes(-1, -2) * scale
        live: Any = True  # the rows that keep a key (by the mask: scores that are all -inf, NaN or +inf are NaN)
        if keep is not None:
            s = np.where(keep, s, -np.inf)
            live = keep.any(axis=-1, keepdims=True)
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(live, m, 0.0))
        p = e / np.where(live, e.sum(axis=-1, keepdims=True), 1.0)
        return back(p @ vf, q)
    torch = sys.modules["torch"]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    keep = keep_mask(*mask, xp=torch, device=q.device)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)
    if keep is not None:  # SDPA leaves NaN where a row keeps nothing (no host sync: masked on the device)
        out = out.masked_fill(~keep.any(dim=1)[:, None], 0.0)
    return out
