"""The vendor calls ``tracea.ops`` falls back to: torch's own ops for torch tensors, NumPy in float64
(reference quality, rounded to the input's dtype at the end) for NumPy arrays. Same semantics as the
kernels: the epilogue vocabulary of kernels/epilogue.py, attention's mask of kernels/ops/attention.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError
from tracea.kernels.epilogue import NUMPY, ArrayMath, apply


def _f64(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind not in "fc" and x.dtype.name != "bfloat16":
        raise BadInputError(f"expected floating-point arrays, got {x.dtype}", "convert with .astype(numpy.float32)")
    return np.asarray(x, dtype=np.float64)


def _back(y: np.ndarray, like: np.ndarray) -> np.ndarray:
    return y.astype(like.dtype)


def _torch_math() -> ArrayMath:
    torch = sys.modules["torch"]
    gelu = torch.nn.functional.gelu
    return ArrayMath(add=lambda c, x: c + x, mul=lambda c, a: c * a,
                     unary={"relu": torch.relu, "gelu": lambda c: gelu(c, approximate="tanh")})


def gemm(a: Any, b: Any, chain: Sequence[str], operands: dict[str, Any], alpha: float) -> Any:
    if isinstance(a, np.ndarray):
        extra = {k: _f64(v) for k, v in operands.items()}
        return _back(apply(chain, _f64(a) @ _f64(b), extra, alpha, NUMPY), a)
    return apply(chain, a @ b, operands, alpha, _torch_math())


def conv2d(x: Any, w: Any, bias: Any, stride: tuple[int, int], pad: tuple[int, int, int, int],
           dilation: tuple[int, int], groups: int, layout: str) -> Any:
    """``pad``: (top, bottom, left, right); uneven padding is applied to x first."""
    even = pad[0] == pad[1] and pad[2] == pad[3]
    if isinstance(x, np.ndarray):
        if not even:
            hw = ((pad[0], pad[1]), (pad[2], pad[3]))
            x = np.pad(x, ((0, 0), (0, 0), *hw) if layout == "nchw" else ((0, 0), *hw, (0, 0)))
        return _conv_numpy(x, w, bias, stride, (pad[0], pad[2]) if even else (0, 0), dilation, groups, layout)
    F = sys.modules["torch"].nn.functional  # noqa: N806 - torch's own name
    xs, ws = (x, w) if layout == "nchw" else (x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2))  # torch computes NCHW
    if not even:
        xs = F.pad(xs, (pad[2], pad[3], pad[0], pad[1]))
    y = F.conv2d(xs, ws, bias, stride, (pad[0], pad[2]) if even else 0, dilation, groups)
    return y if layout == "nchw" else y.permute(0, 2, 3, 1).contiguous()


def _conv_numpy(x: np.ndarray, w: np.ndarray, bias: Any, stride: tuple[int, int], padding: tuple[int, int],
                dilation: tuple[int, int], groups: int, layout: str) -> np.ndarray:
    """The IR's float64 reference (kernels/ops/conv2d.py Conv2d.reference): any stride, padding, dilation, groups."""
    from tracea.kernels import Conv2d

    xs = x if layout == "nchw" else x.transpose(0, 3, 1, 2)
    ws = w if layout == "nchw" else w.transpose(0, 3, 1, 2)
    (n, c, h, wd), (k, _, r, s) = xs.shape, ws.shape
    op = Conv2d(n=n, c=c, h=h, w=wd, k=k, r=r, s=s, stride=stride, padding=padding, dilation=dilation,
                groups=groups, bias=bias is not None, layout="nchw")
    inputs = {"x": _f64(xs), "weight": _f64(ws)} | ({"bias": _f64(bias)} if bias is not None else {})
    y = op.reference(inputs)
    return _back(y if layout == "nchw" else np.ascontiguousarray(y.transpose(0, 2, 3, 1)), x)


def softmax(x: Any, dim: int) -> Any:
    if isinstance(x, np.ndarray):
        v = _f64(x)
        e = np.exp(v - v.max(axis=dim, keepdims=True))
        return _back(e / e.sum(axis=dim, keepdims=True), x)
    return sys.modules["torch"].softmax(x, dim)


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


def attention(q: Any, k: Any, v: Any, scale: float, mask: tuple[Any, ...]) -> Any:
    """O = softmax(q k^T * scale, masked by ``keep_mask(*mask)``) v, q head h on kv head h // (H / Hkv); a
    row that keeps no key is 0 (as the kernels write it)."""
    group = q.shape[1] // k.shape[1]
    if isinstance(q, np.ndarray):
        keep = keep_mask(*mask)
        qf, kf, vf = _f64(q), _f64(k), _f64(v)
        kf, vf = np.repeat(kf, group, axis=1), np.repeat(vf, group, axis=1)
        s = qf @ kf.swapaxes(-1, -2) * scale
        live: Any = True  # the rows that keep a key (by the mask: scores that are all -inf, NaN or +inf are NaN)
        if keep is not None:
            s = np.where(keep, s, -np.inf)
            live = keep.any(axis=-1, keepdims=True)
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(live, m, 0.0))
        p = e / np.where(live, e.sum(axis=-1, keepdims=True), 1.0)
        return _back(p @ vf, q)
    torch = sys.modules["torch"]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    keep = keep_mask(*mask, xp=torch, device=q.device)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale)
    if keep is not None:  # SDPA leaves NaN where a row keeps nothing (no host sync: masked on the device)
        out = out.masked_fill(~keep.any(dim=1)[:, None], 0.0)
    return out
