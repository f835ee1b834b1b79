"""The op functions of ``tracea.ops``: argument checks and the IR value of each call; the routing is
_dispatch's."""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from . import _vendor
from ._arrays import Arg, describe, is_torch, shown
from ._dispatch import EXPLAINING, prepared, run
from ._engine import Fallback
from ._prepared import MISS, RETRY, Uncached, array_key, mask_key, opt, out_key

# tracea.ops' op functions, in the order help(tracea.ops) lists them: tracea.ops imports and offers these
# names (ops/__init__.py reads this list), so a new op's function is offered where it is written.
__all__ = ["gemm", "conv2d", "softmax", "attention"]

# Each op function makes its call's key and goes through _dispatch.prepared: a signature prepared by an earlier
# call runs its launch at once; any other call takes the slow path below it (every check, the route, the
# kernel), which prepares the key where the kernel ran (MISS) or prepares nothing (RETRY).


def _ir(build: Any) -> Any:
    """The op's IR value; a shape the IR refuses is a fallback (the vendor call may still take it)."""
    try:
        return build()
    except BadInputError as exc:
        raise Fallback(f"the kernels do not take this shape ({exc.message})") from None


def _transposed_dense(arg: Arg) -> Any | None:
    """``arg``'s transpose when that is dense row-major (a column-major matrix), else None."""
    t = arg.obj.T
    return t if (t.flags.c_contiguous if arg.kind == "numpy" else t.is_contiguous()) else None


def _major(name: str, arg: Arg) -> tuple[str, Any]:
    if (arg.obj.flags.c_contiguous if arg.kind == "numpy" else arg.obj.is_contiguous()):
        return "row", arg.obj
    t = _transposed_dense(arg)
    if t is None:
        raise Fallback(f"{name} is neither row- nor column-major (a strided view); call .contiguous() first")
    return "col", t


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or None: a real number (not a bool) that stays finite as a float (an
    integer past float's range does not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _alpha(alpha: Any) -> float:
    f = _finite(alpha)
    if f is None:
        raise BadInputError(f"alpha: expected a finite real number, got {shown(alpha)}", "e.g. alpha=0.5")
    return f


def _chain(epilogue: str | Sequence[str] | None, given: dict[str, bool], alpha: float) -> tuple[str, ...]:
    from tracea.kernels.epilogue import VOCABULARY

    if epilogue is not None and not isinstance(epilogue, str) and not (
            isinstance(epilogue, Sequence) and all(isinstance(e, str) for e in epilogue)):
        raise BadInputError(f"epilogue: expected a comma-separated string or a list of names, got {shown(epilogue)}",
                            'e.g. epilogue="bias,gelu" or epilogue=["bias", "gelu"]')
    if epilogue is None:
        chain = [*(["bias"] if given["bias"] else []), *(["scale"] if alpha != 1.0 else []),
                 *(["residual"] if given["residual"] else [])]
        return tuple(chain)
    chain = [e.strip() for e in (epilogue.split(",") if isinstance(epilogue, str) else epilogue) if e.strip()]
    unknown = [e for e in chain if e not in VOCABULARY]
    if unknown:
        raise BadInputError(f"epilogue: unknown op {shown(unknown[0], 40)}; known: {', '.join(VOCABULARY)}",
                            'e.g. epilogue="bias,gelu"')
    if alpha != 1.0 and "scale" not in chain:  # else alpha would be silently ignored
        raise BadInputError(f"epilogue: alpha={alpha:g} is given but scale is not named in the chain "
                            f"({','.join(chain)})", 'name scale where alpha applies, e.g. epilogue="scale,relu"')
    for operand, present in given.items():
        if present != (operand in chain):
            raise BadInputError(f"epilogue: {operand} is {'given' if present else 'named'} but "
                                f"{'not named in the chain' if present else 'not given'} ({','.join(chain)})",
                                f"pass {operand}=... and name it in epilogue, or neither")
    return tuple(chain)


def gemm(a: Any, b: Any, *, bias: Any = None, residual: Any = None, epilogue: str | Sequence[str] | None = None,
         alpha: float = 1.0, out: Any = None) -> Any:
    """``epilogue(a @ b)`` for 2-D ``a`` (m, k) and ``b`` (k, n). ``epilogue``: ops of kernels/epilogue.py in
    order (bias, relu, gelu, scale, residual); by default bias (if given), scale (if alpha != 1), residual
    (if given). A column-major operand (``x.T`` of a dense matrix) is read in place. Batches (``a`` (..., m, k),
    ``b`` (..., k, n), the leading sizes broadcast as in ``numpy.matmul``) take the vendor call."""
    try:
        key = ("gemm", array_key(a), array_key(b), array_key(bias), array_key(residual), opt(epilogue), opt(alpha),
               None if out is None else out_key(out))
    except Uncached:
        key = None
    y = prepared(key, (a, b, bias, residual), out)
    if y is MISS or y is RETRY:
        return _gemm(a, b, bias, residual, epilogue, alpha, out, key if y is MISS else None)
    return y


def _gemm(a: Any, b: Any, bias: Any, residual: Any, epilogue: Any, alpha: Any, out: Any,
          key: tuple[Any, ...] | None) -> Any:
    args = {"a": describe("a", a), "b": describe("b", b)}
    operands = {n: v for n, v in (("bias", bias), ("residual", residual)) if v is not None}
    args |= {n: describe(n, v) for n, v in operands.items()}
    alpha = _alpha(alpha)
    ash, bsh = args["a"].shape, args["b"].shape
    for name in ("a", "b"):  # a column-major operand is read in place (layout "col"): not a strided view
        if len(args[name].shape) == 2 and not args[name].contiguous and _transposed_dense(args[name]) is not None:
            args[name] = dataclasses.replace(args[name], contiguous=True)
    chain = _chain(epilogue, {"bias": bias is not None, "residual": residual is not None}, alpha)
    if len(ash) < 2 or len(bsh) < 2:
        raise BadInputError(f"gemm: a is {ash} and b is {bsh}: expected matrices (or batches of them)",
                            "a vector v takes v[None, :] (a row) or v[:, None] (a column)")
    if ash[-1] != bsh[-2]:
        raise BadInputError(f"gemm: a is {ash} and b is {bsh}: inner sizes differ",
                            "a is (m, k) and b is (k, n); transpose one with .T")
    try:
        batch = np.broadcast_shapes(ash[:-2], bsh[:-2])
    except ValueError:
        raise BadInputError(f"gemm: a is {ash} and b is {bsh}: the batch sizes do not broadcast",
                            "leading sizes must match or be 1, as in numpy.matmul") from None
    batched = len(ash) != 2 or len(bsh) != 2
    m, n = ash[-2], bsh[-1]
    out_shape = (*batch, m, n)
    for name, want in (("bias", (n,)), ("residual", out_shape)):
        if name in args and args[name].shape != want:
            raise BadInputError(f"gemm: {name} is {args[name].shape}, expected {want}",
                                "bias has one value per output column; residual is the output's shape")

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Gemm

        if batched:
            raise Fallback(f"a is {len(ash)}-D and b is {len(bsh)}-D; the kernels take 2-D matrices")
        la, fa = _major("a", args["a"])
        lb, fb = _major("b", args["b"])
        op = _ir(lambda: Gemm(m=m, n=n, k=ash[1], dtype=args["a"].dtype, layout_a=la, layout_b=lb, epilogue=chain,
                              alpha=alpha))
        return op, {"a": fa, "b": fb, **operands}

    vendor = {"numpy": "numpy.matmul in float64 + the epilogue", "torch": "torch.matmul + the epilogue in torch"}
    return run("gemm", args, plan, out, out_shape, lambda: _vendor.gemm(a, b, chain, operands, alpha), vendor,
               fast=(key, ("a", "b", "bias", "residual"), (a, b, bias, residual)))


def _pair(name: str, v: Any, low: int = 1) -> tuple[int, int]:
    """An integer or a pair of integers, each from ``low`` (strides and dilations 1, paddings 0) to 2**31 - 1
    (the IR's largest size)."""
    def one(x: Any) -> int:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not low <= int(x) < 2**31:
            raise BadInputError(f"{name}: expected integers from {low} to 2**31 - 1, got {shown(v)}",
                                f"e.g. {name}={max(low, 1)} or {name}=({max(low, 1)}, 2)")
        return int(x)

    if isinstance(v, (tuple, list)) and len(v) == 2:
        return one(v[0]), one(v[1])
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return one(v), one(v)
    raise BadInputError(f"{name}: expected an integer or a pair, got {shown(v)}", f"e.g. {name}=1 or {name}=(1, 2)")


def _padding(padding: Any, rs: tuple[int, int], dilation: tuple[int, int],
             stride: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, bottom, left, right); "same" puts an odd extra row or column at the bottom or right, as torch."""
    if isinstance(padding, str):  # only a str is compared: an array's == would answer elementwise
        if padding == "valid":
            return 0, 0, 0, 0
        if padding != "same":
            raise BadInputError(f"padding: expected an integer, a pair, 'valid' or 'same', got {shown(padding)}",
                                "e.g. padding=1, padding=(1, 0) or padding='same'")
        if stride != (1, 1):
            raise BadInputError("conv2d: padding='same' is not supported for strided convolutions (as in torch)",
                                "give the padding as integers")
        (th, tw) = (d * (f - 1) for d, f in zip(dilation, rs, strict=True))
        return th // 2, th - th // 2, tw // 2, tw - tw // 2
    ph, pw = _pair("padding", padding, low=0)
    return ph, ph, pw, pw


def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, layout: str = "nchw", out: Any = None) -> Any:
    """torch.nn.functional.conv2d's semantics (cross-correlation). ``layout="nchw"``: x (N, C, H, W), weight
    (K, C/groups, R, S), result (N, K, P, Q); a torch tensor in channels_last memory (x and weight both) is read
    in place and the result is channels_last too. ``layout="nhwc"`` (NumPy or torch): x (N, H, W, C), weight
    (K, R, S, C/groups), result (N, P, Q, K)."""
    try:
        key = ("conv2d", array_key(x), array_key(weight), array_key(bias), opt(stride), opt(padding), opt(dilation),
               opt(groups), opt(layout), None if out is None else out_key(out))
    except Uncached:
        key = None
    y = prepared(key, (x, weight, bias), out)
    if y is MISS or y is RETRY:
        return _conv2d(x, weight, bias, stride, padding, dilation, groups, layout, out, key if y is MISS else None)
    return y


def _conv_dims(args: dict[str, Arg], layout: str) -> tuple[int, ...]:
    """(n, c, h, w, k, c/groups, r, s) of a conv's x and weight in ``layout``; both must be 4-D."""
    xs, ws = args["x"].shape, args["weight"].shape
    if len(xs) != 4 or len(ws) != 4:
        raise BadInputError(f"conv2d: x and weight must be 4-D, got {xs} and {ws}",
                            "an unbatched image takes x[None]; nn.Conv2d layers do this for you")
    n, c, h, w = xs if layout == "nchw" else (xs[0], xs[3], xs[1], xs[2])
    k, cg, r, s = ws if layout == "nchw" else (ws[0], ws[3], ws[1], ws[2])
    return n, c, h, w, k, cg, r, s


def _check_conv_sizes(args: dict[str, Arg], layout: str, groups: Any, dims: tuple[int, ...]) -> None:
    """The groups, the filter's and the image's sizes, the channels and the bias agree."""
    c, h, w, k, cg, r, s = dims
    xs, ws = args["x"].shape, args["weight"].shape
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or not 1 <= groups < 2**31:
        raise BadInputError(f"conv2d: groups expected a positive integer, got {shown(groups)}", "e.g. groups=1")
    if min(cg, r, s) < 1:
        raise BadInputError(f"conv2d: weight is {ws}: its input channels and filter sizes must be at least 1",
                            "weight is (K, C/groups, R, S) for nchw, (K, R, S, C/groups) for nhwc")
    if min(h, w) < 1:  # padding alone would make an output of it, which no path computes
        raise BadInputError(f"conv2d: x is {xs}: its height and width must be at least 1",
                            "x is (N, C, H, W) for nchw, (N, H, W, C) for nhwc")
    if c != cg * groups:
        raise BadInputError(f"conv2d: x has {c} channels, weight expects {cg} x groups={groups}",
                            f"check layout={layout!r}: weight is (K, C/groups, R, S) for nchw, (K, R, S, C/groups) for nhwc")
    if "bias" in args and args["bias"].shape != (k,):
        raise BadInputError(f"conv2d: bias is {args['bias'].shape}, expected ({k},)", "one value per output channel")


def _conv2d(x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: Any, layout: Any,
            out: Any, key: tuple[Any, ...] | None) -> Any:
    if not isinstance(layout, str) or layout.lower() not in ("nchw", "nhwc"):
        raise BadInputError(f"conv2d: layout expected 'nchw' or 'nhwc', got {shown(layout)}",
                            "torch tensors in channels_last memory take the default 'nchw'")
    layout = layout.lower()
    args = {"x": describe("x", x), "weight": describe("weight", weight)}
    if bias is not None:
        args["bias"] = describe("bias", bias)
    n, c, h, w, k, cg, r, s = _conv_dims(args, layout)
    stride, dilation = _pair("stride", stride), _pair("dilation", dilation)
    pad = _padding(padding, (r, s), dilation, stride)
    _check_conv_sizes(args, layout, groups, (c, h, w, k, cg, r, s))
    p = (h + pad[0] + pad[1] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    q = (w + pad[2] + pad[3] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    even = pad[0] == pad[1] and pad[2] == pad[3]
    if p < 1 or q < 1:
        raise BadInputError(f"conv2d: the dilated filter is larger than the padded input ({h}x{w})",
                            "more padding, or a smaller filter or dilation")
    out_shape = (n, k, p, q) if layout == "nchw" else (n, p, q, k)
    channels_last = layout == "nchw" and _channels_last(args)
    ir_layout = "nhwc" if channels_last else layout

    def plan() -> tuple[Any, dict[str, Any]]:

        if not even:
            raise Fallback(f"padding='same' pads unevenly here (top/bottom {pad[:2]}, left/right {pad[2:]}); "
                           "the kernels pad both sides alike")
        op = _ir(lambda: _conv_ir(n, c, h, w, k, r, s, stride, (pad[0], pad[2]), dilation, int(groups), ir_layout,
                                  bias is not None, args["x"].dtype))
        feeds = {"x": x.permute(0, 2, 3, 1), "weight": weight.permute(0, 2, 3, 1)} if channels_last else {
            "x": x, "weight": weight}
        return op, feeds | ({"bias": bias} if bias is not None else {})

    def alloc() -> Any:  # channels_last: an NHWC buffer seen as NCHW, as torch returns it
        torch = sys.modules["torch"]
        return torch.empty((n, p, q, k), dtype=x.dtype, device=x.device).permute(0, 3, 1, 2)

    vendor = {"numpy": "the float64 NumPy convolution (kernels' reference)", "torch": "torch.nn.functional.conv2d"}
    return run("conv2d", args, plan, out, out_shape,
               lambda: _vendor.conv2d(x, weight, bias, stride, pad, dilation, int(groups), layout), vendor,
               kernel_out=(lambda o: o.permute(0, 2, 3, 1)) if channels_last else (lambda o: o),
               alloc=alloc if channels_last else None, notes=_nchw_note if ir_layout == "nchw" else None,
               out_channels_last=channels_last, fast=(key, ("x", "weight", "bias"), (x, weight, bias)))


_NCHW_WARNED: list[bool] = []


def _nchw_note(route: Any, op: Any) -> list[str]:
    """The route's note for an NCHW conv on a kernel that reads another layout (the backend says what it costs:
    ``layout_cost``), and (once a process) a warning: on an H100 the Hopper conv's three transposes made
    ResNet-50's convs 0.30-1.19x cuDNN where channels_last gave 1.12-3.14x."""
    from tracea.emitters import registry

    cost = registry.backend(route.backend).layout_cost(op, route.variant) if route.backend else None
    if not cost:
        return []
    note = (f"NCHW: {cost}; tensors in channels_last memory (model.to(memory_format=torch.channels_last)) are read "
            "in place")
    if not _NCHW_WARNED and not EXPLAINING.get():
        _NCHW_WARNED.append(True)
        warnings.warn(f"tracea.ops.conv2d: {note}", stacklevel=5)
    return [note]


@functools.lru_cache(maxsize=1024)
def _conv_ir(*fields: Any) -> Any:
    """The Conv2d IR value (validated once per distinct layer: its checks cost host time at every call)."""
    from tracea.kernels import Conv2d

    names = ("n", "c", "h", "w", "k", "r", "s", "stride", "padding", "dilation", "groups", "layout", "bias", "dtype")
    return Conv2d(**dict(zip(names, fields, strict=True)))


def _channels_last(args: dict[str, Arg]) -> bool:
    """Both x and weight torch tensors in channels_last memory (and not also plain contiguous)."""
    x, w = args["x"], args["weight"]
    if x.kind != "torch" or x.contiguous:
        return False
    torch = sys.modules["torch"]
    ok = all(a.obj.is_contiguous(memory_format=torch.channels_last) for a in (x, w))
    if ok:  # the kernel reads the NHWC views; mark them contiguous for the common checks
        for name in ("x", "weight"):
            args[name] = dataclasses.replace(args[name], contiguous=True)
    return ok


def softmax(x: Any, dim: int = -1, out: Any = None) -> Any:
    """Numerically stable softmax over ``dim``; the kernel reduces the last axis (any leading shape)."""
    try:
        key = ("softmax", array_key(x), dim if type(dim) is int else opt(dim), None if out is None else out_key(out))
    except Uncached:
        key = None
    y = prepared(key, (x,), out)
    if y is MISS or y is RETRY:
        return _softmax(x, dim, out, key if y is MISS else None)
    return y


def _softmax(x: Any, dim: Any, out: Any, key: tuple[Any, ...] | None) -> Any:
    args = {"x": describe("x", x)}
    shape = args["x"].shape
    if not shape:
        raise BadInputError("softmax: x must have at least one dimension", "a scalar's softmax is 1")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -len(shape) <= dim < len(shape):
        raise BadInputError(f"softmax: dim {shown(dim)} is out of range for {len(shape)}-D x",
                            f"use -{len(shape)} .. {len(shape) - 1}")
    dim = int(dim) % len(shape)
    cols = shape[-1]
    rows = math.prod(shape[:-1])

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Softmax

        if dim != len(shape) - 1:
            raise Fallback(f"softmax over dim {dim}, not the last: the kernel reduces rows")
        op = _ir(lambda: Softmax(rows=rows, cols=cols, dtype=args["x"].dtype))
        return op, {"x": x.reshape(rows, cols)}

    vendor = {"numpy": "NumPy softmax in float64", "torch": "torch.softmax"}
    return run("softmax", args, plan, out, shape, lambda: _vendor.softmax(x, dim), vendor,
               kernel_out=lambda o: o.reshape(rows, cols), fast=(key, ("x",), (x,)))


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
    sc = _finite(scale) if scale is not None else 1.0 / math.sqrt(d) if d else 1.0
    if sc is None or sc <= 0:
        raise BadInputError(f"attention: scale expected a positive finite number, got {shown(scale)}",
                            "leave it out for 1/sqrt(head_dim)")
    bsize = _pair("block_size", block_size)
    win = None if window is None else _pair("window", window, low=0)
    mask = None
    if block_mask is not None:  # checked here, not only by the op: a fallback reads it too
        from tracea.kernels.ops.attention import check_block_mask

        given = block_mask.detach().cpu().numpy() if is_torch(block_mask) else block_mask
        mask = check_block_mask(given, sq, sk, bsize)

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Attention

        op = _ir(lambda: Attention(batch=b_, heads=h, seq_q=sq, head_dim=d, seq_k=sk, kv_heads=hkv,
                                   dtype=args["q"].dtype, causal=bool(causal), scale=sc, window=win,
                                   block_mask=mask, block_size=bsize))
        return op, {"q": q, "k": k, "v": v}

    def vendor() -> Any:
        bm = None if mask is None else np.array([[c == "1" for c in row] for row in mask], dtype=bool)
        return _vendor.attention(q, k, v, sc, (sq, sk, bool(causal), win, bm, bsize))

    names = {"numpy": "NumPy attention in float64", "torch": "torch.nn.functional.scaled_dot_product_attention"}
    return run("attention", args, plan, out, qs, vendor, names, fast=(key, ("q", "k", "v"), (q, k, v)))
