"""``tracea.ops.conv2d``: torch.nn.functional.conv2d's semantics; its arguments checked, its IR value, its
vendor fallback (``fallback``)."""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from .._arrays import Arg, describe, shown
from .._checks import ir, pair
from .._dispatch import EXPLAINING, prepared, run
from .._engine import Fallback
from .._prepared import MISS, RETRY, Uncached, array_key, opt, out_key
from .._vendor import back, f64

ORDER = 20  # its place in tracea.ops (help, __all__)
__all__ = ["conv2d"]
# its PyTorch pieces (in _torch/conv2d.py, which imports torch), offered by tracea.ops where torch is installed
TORCH_PIECES: tuple[str, ...] = ("TraceaConv2d", "patch_conv2d", "unpatch_conv2d")


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
    ph, pw = pair("padding", padding, low=0)
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
    stride, dilation = pair("stride", stride), pair("dilation", dilation)
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
        op = ir(lambda: _conv_ir(n, c, h, w, k, r, s, stride, (pad[0], pad[2]), dilation, int(groups), ir_layout,
                                  bias is not None, args["x"].dtype))
        feeds = {"x": x.permute(0, 2, 3, 1), "weight": weight.permute(0, 2, 3, 1)} if channels_last else {
            "x": x, "weight": weight}
        return op, feeds | ({"bias": bias} if bias is not None else {})

    def alloc() -> Any:  # channels_last: an NHWC buffer seen as NCHW, as torch returns it
        torch = sys.modules["torch"]
        return torch.empty((n, p, q, k), dtype=x.dtype, device=x.device).permute(0, 3, 1, 2)

    vendor = {"numpy": "the float64 NumPy convolution (kernels' reference)", "torch": "torch.nn.functional.conv2d"}
    return run("conv2d", args, plan, out, out_shape,
               lambda: fallback(x, weight, bias, stride, pad, dilation, int(groups), layout), vendor,
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




def fallback(x: Any, w: Any, bias: Any, stride: tuple[int, int], pad: tuple[int, int, int, int],
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
    inputs = {"x": f64(xs), "weight": f64(ws)} | ({"bias": f64(bias)} if bias is not None else {})
    y = op.reference(inputs)
    return back(y if layout == "nchw" else np.ascontiguousarray(y.transpose(0, 2, 3, 1)), x)


