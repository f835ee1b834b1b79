"""``tracea.ops.attention``: its arguments checked, its IR value, its vendor fallback (``fallback``, over the
mask of kernels/ops/attention.py as a boolean array: ``keep_mask``)."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from .._arrays import describe, is_torch, shown
from .._checks import finite, ir, pair
from .._dispatch import prepared, run
from .._prepared import MISS, RETRY, Uncached, array_key, mask_key, opt, out_key
from .._vendor import back, f64

ORDER = 40  # its place in tracea.ops (help, __all__)
__all__ = ["attention"]
# its PyTorch pieces (in _torch/attention.py, which imports torch), offered by tracea.ops where torch is installed
TORCH_PIECES: tuple[str, ...] = ()


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              window: Any = None, block_mask: Any = None, block_size: Any = (128, 128), out: Any = None) -> Any:
    """softmax(q k^T * scale + mask) v in the Attention op's layout: q (B, H, Sq, D), k and v (B, Hkv, Sk, D),
    q head h reading kv head h // (H / Hkv) (grouped-query). The mask (kernels/ops/attention.py): causal with the
    diagonal aligned bottom-right, ``window`` = (left, right) keys, ``block_mask`` (Sq/bq x Sk/bk booleans, a
    NumPy array or tensor) over ``block_size`` tiles. A row that keeps no key is 0."""
    try:
        key = ("attention", array_key(q), array_key(k), array_key(v), opt(causal), opt(scale), opt(window),
               mask_key(block_mask), opt(block_size), None if out is None else out_key(out))
    except Uncached:
        key = None
    y = prepared(key, (q, k, v), out)
    if y is MISS or y is RETRY:
        return _attention(q, k, v, causal, scale, window, block_mask, block_size, out, key if y is MISS else None)
    return y


def _attention(q: Any, k: Any, v: Any, causal: Any, scale: Any, window: Any, block_mask: Any, block_size: Any,
               out: Any, key: tuple[Any, ...] | None) -> Any:
    args = {"q": describe("q", q), "k": describe("k", k), "v": describe("v", v)}
    qs, ks, vs = args["q"].shape, args["k"].shape, args["v"].shape
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
    if not isinstance(causal, (bool, np.bool_)):
        raise BadInputError(f"attention: causal expected True or False, got {shown(causal)}", "e.g. causal=True")
    sc = finite(scale) if scale is not None else 1.0 / math.sqrt(d) if d else 1.0
    if sc is None or sc <= 0:
        raise BadInputError(f"attention: scale expected a positive finite number, got {shown(scale)}",
                            "leave it out for 1/sqrt(head_dim)")
    bsize = pair("block_size", block_size)
    win = None if window is None else pair("window", window, low=0)
    mask = None
    if block_mask is not None:  # checked here, not only by the op: a fallback reads it too
        from tracea.kernels.ops.attention import check_block_mask

        given = block_mask.detach().cpu().numpy() if is_torch(block_mask) else block_mask
        mask = check_block_mask(given, sq, sk, bsize)

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Attention

        op = ir(lambda: Attention(batch=b_, heads=h, seq_q=sq, head_dim=d, seq_k=sk, kv_heads=hkv,
                                   dtype=args["q"].dtype, causal=bool(causal), scale=sc, window=win,
                                   block_mask=mask, block_size=bsize))
        return op, {"q": q, "k": k, "v": v}

    def vendor() -> Any:
        bm = None if mask is None else np.array([[c == "1" for c in row] for row in mask], dtype=bool)
        return fallback(q, k, v, sc, (sq, sk, bool(causal), win, bm, bsize))

    names = {"numpy": "NumPy attention in float64", "torch": "torch.nn.functional.scaled_dot_product_attention"}
    return run("attention", args, plan, out, qs, vendor, names, fast=(key, ("q", "k", "v"), (q, k, v)))


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
