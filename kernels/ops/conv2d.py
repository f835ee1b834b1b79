"""The 2-D convolution (cross-correlation, as in PyTorch), NCHW or NHWC, lowered to implicit GEMM, and its
suite of the shapes users bring.

- ``resnet50``: every distinct convolution of ResNet-50 (torchvision's v1.5, the stride on the 3x3 of a
  bottleneck): the 7x7 stem, then per stage the 1x1 reduce, 3x3, 1x1 expand, the strided 3x3 and 1x1
  downsample of the first block. 23 shapes, NHWC; a CPU runs them in fp32 at batch 1, a GPU in fp16 at
  batch 1 and 32.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tracea.doctor.errors import BadInputError

from .. import fields
from ..dtypes import DType, parse_dtype, to_float64
from ..op import Op, Suite, register

CONV_LAYOUTS = ("nchw", "nhwc")

# (c, h=w, k, r=s, stride, padding) of each distinct ResNet-50 convolution, in network order
RESNET50 = (
    (3, 224, 64, 7, 2, 3),  # stem
    (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1), (64, 56, 256, 1, 1, 0), (256, 56, 64, 1, 1, 0),
    (256, 56, 128, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 0), (256, 56, 512, 1, 2, 0),
    (512, 28, 128, 1, 1, 0), (128, 28, 128, 3, 1, 1),
    (512, 28, 256, 1, 1, 0), (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 0), (512, 28, 1024, 1, 2, 0),
    (1024, 14, 256, 1, 1, 0), (256, 14, 256, 3, 1, 1),
    (1024, 14, 512, 1, 1, 0), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 0), (1024, 14, 2048, 1, 2, 0),
    (2048, 7, 512, 1, 1, 0), (512, 7, 512, 3, 1, 1),
)


def resnet50_convs(dtype: str, batches: Iterable[int] = (1, 32), layout: str = "nhwc",
                   shapes: Iterable[tuple[int, ...]] = RESNET50) -> list[Any]:
    return [Conv2d(n=b, c=c, h=hw, w=hw, k=k, r=rs, s=rs, stride=st, padding=p, layout=layout, dtype=dtype)
            for b in batches for c, hw, k, rs, st, p in shapes]


def _resnet50(target: str, quick: bool) -> list[Any]:
    if target == "host":
        return resnet50_convs("fp32", batches=(1,), shapes=(RESNET50[2], RESNET50[13]) if quick else RESNET50)
    if quick:
        return resnet50_convs("fp16", batches=(1,), shapes=(RESNET50[0], RESNET50[2], RESNET50[3]))
    return resnet50_convs("fp16", batches=(1, 32))


RESNET50_SUITE = Suite("resnet50", "every distinct convolution of ResNet-50, NHWC", _resnet50)


@register
@dataclass(frozen=True)
class Conv2d(Op):
    """2-D convolution (cross-correlation, as in PyTorch): input N x C x H x W (or NHWC), filter
    K x C/groups x R x S (or K x R x S x C/groups for NHWC), output N x K x P x Q (or NHWC).
    Lowered to implicit GEMM: GEMM_M = N*P*Q, GEMM_N = K, GEMM_K = C/groups*R*S."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    layout: str = "nchw"
    bias: bool = False
    dtype: DType = DType.FP32
    kind: ClassVar[str] = "conv2d"
    plot_marker: ClassVar[str] = "s"
    phase: ClassVar[str] = "mma"
    default_shape: ClassVar[dict[str, Any]] = {"n": 1, "c": 64, "h": 224, "w": 224, "k": 128, "r": 3, "s": 3,
                                               "padding": 1}
    order: ClassVar[int] = 20
    suites: ClassVar[tuple[Suite, ...]] = (RESNET50_SUITE,)

    def __post_init__(self) -> None:
        for name in ("n", "c", "h", "w", "k", "r", "s", "groups"):
            object.__setattr__(self, name, fields.positive(name, getattr(self, name)))
        object.__setattr__(self, "stride", fields.pair("stride", self.stride, fields.positive))
        object.__setattr__(self, "padding", fields.pair("padding", self.padding, fields.non_negative))
        object.__setattr__(self, "dilation", fields.pair("dilation", self.dilation, fields.positive))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        layout = str(self.layout).lower()
        if layout not in CONV_LAYOUTS:
            raise BadInputError(f"layout: expected nchw or nhwc, got {self.layout!r}")
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "bias", bool(self.bias))
        if self.c % self.groups:
            raise BadInputError(f"groups: c={self.c} is not divisible by groups={self.groups}")
        if self.k % self.groups:
            raise BadInputError(f"groups: k={self.k} is not divisible by groups={self.groups}")
        for axis, size, filt, i in (("h", self.h, self.r, 0), ("w", self.w, self.s, 1)):
            span = self.dilation[i] * (filt - 1) + 1
            if size + 2 * self.padding[i] < span:
                raise BadInputError(
                    f"{'r' if i == 0 else 's'}: the dilated filter ({span}) is larger than the padded input "
                    f"{axis} ({size} + 2 x {self.padding[i]})")
        fields.elements("input", self.n, self.c, self.h, self.w)
        fields.elements("filter", self.k, self.c // self.groups, self.r, self.s)
        fields.elements("output", self.n, self.k, self.p, self.q)
        fields.elements("GEMM (M x K)", self.gemm_m, self.gemm_k)

    @property
    def p(self) -> int:
        return (self.h + 2 * self.padding[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.padding[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1

    @property
    def gemm_m(self) -> int:
        return self.n * self.p * self.q

    @property
    def gemm_n(self) -> int:
        return self.k

    @property
    def gemm_k(self) -> int:
        return (self.c // self.groups) * self.r * self.s

    @property
    def flops(self) -> int:
        return 2 * self.gemm_m * self.gemm_n * self.gemm_k + (self.gemm_m * self.gemm_n if self.bias else 0)

    @property
    def bytes(self) -> int:
        size = self.dtype.itemsize
        elems = self.n * self.c * self.h * self.w + self.k * (self.c // self.groups) * self.r * self.s
        elems += self.n * self.k * self.p * self.q + (self.k if self.bias else 0)
        return elems * size

    def shapes(self) -> dict[str, tuple[int, ...]]:
        cg = self.c // self.groups
        if self.layout == "nchw":
            s = {"x": (self.n, self.c, self.h, self.w), "weight": (self.k, cg, self.r, self.s)}
        else:
            s = {"x": (self.n, self.h, self.w, self.c), "weight": (self.k, self.r, self.s, cg)}
        if self.bias:
            s["bias"] = (self.k,)
        return s

    def extent(self) -> str:
        return f"{self.n}x{self.c}x{self.h}x{self.w}k{self.k}"

    def c_reference(self, epilogue: Mapping[str, str]) -> str:
        (sh, sw), (ph, pw), (dh, dw) = self.stride, self.padding, self.dilation
        nchw = self.layout == "nchw"
        xi = "((n * C + c) * H + y) * W + xx" if nchw else "((n * H + y) * W + xx) * C + c"
        wi = "((k * CG + cg) * R + r) * S + s" if nchw else "((k * R + r) * S + s) * CG + cg"
        oi = "((n * K + k) * P + pp) * Q + q" if nchw else "((n * P + pp) * Q + q) * K + k"
        bias = "v += bias[k];" if self.bias else ""
        return f"""enum {{ NB = {self.n}, C = {self.c}, H = {self.h}, W = {self.w}, K = {self.k}, R = {self.r}, S = {self.s}, P = {self.p},
           Q = {self.q}, G = {self.groups}, CG = {self.c // self.groups}, KG = {self.k // self.groups} }};
    for (long n = 0; n < NB; ++n)
        for (long k = 0; k < K; ++k)
            for (long pp = 0; pp < P; ++pp)
                for (long q = 0; q < Q; ++q) {{
                    double v = 0;
                    for (long cg = 0; cg < CG; ++cg)
                        for (long r = 0; r < R; ++r)
                            for (long s = 0; s < S; ++s) {{
                                long y = pp * {sh} - {ph} + r * {dh}, xx = q * {sw} - {pw} + s * {dw};
                                long c = (k / KG) * CG + cg;
                                if (y < 0 || y >= H || xx < 0 || xx >= W) continue;
                                v += x[{xi}] * weight[{wi}];
                            }}
                    {bias}
                    ref[{oi}] = v;
                }}"""

    def output_shape(self) -> tuple[int, ...]:
        return (self.n, self.k, self.p, self.q) if self.layout == "nchw" else (self.n, self.p, self.q, self.k)

    def case_label(self) -> str:
        """conv2d n32 c256 56x56 k256 3x3 s1 p1 nhwc fp16 (a pair of unequal values as a list: s[1, 2])"""
        def pair(v: tuple[int, int]) -> int | list[int]:
            return v[0] if v[0] == v[1] else list(v)

        return (f"conv2d n{self.n} c{self.c} {self.h}x{self.w} k{self.k} {self.r}x{self.s} s{pair(self.stride)} "
                f"p{pair(self.padding)} {self.layout} {self.dtype.value}")

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        return f"n{shape.get('n')} c{shape.get('c')} {shape.get('h')}x{shape.get('w')} k{shape.get('k')}"

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        scale = 1.0 / math.sqrt(math.sqrt(self.gemm_k))
        return {name: fields.random(rng, shape, self.dtype, 1.0 if name == "bias" else scale)
                for name, shape in self.shapes().items()}

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        x = to_float64(inputs["x"], self.dtype)
        wt = to_float64(inputs["weight"], self.dtype)
        if self.layout == "nhwc":
            x = x.transpose(0, 3, 1, 2)
            wt = wt.transpose(0, 3, 1, 2)
        (sh, sw), (ph, pw), (dh, dw) = self.stride, self.padding, self.dilation
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        g, cg, kg = self.groups, self.c // self.groups, self.k // self.groups
        out = np.empty((self.n, self.k, self.p, self.q))
        for gi in range(g):
            xg = x[:, gi * cg:(gi + 1) * cg]
            wg = wt[gi * kg:(gi + 1) * kg]
            acc = np.zeros((self.n, kg, self.p, self.q))
            for ri in range(self.r):
                for si in range(self.s):
                    patch = xg[:, :, ri * dh: ri * dh + sh * (self.p - 1) + 1: sh,
                               si * dw: si * dw + sw * (self.q - 1) + 1: sw]  # N x Cg x P x Q
                    acc += np.einsum("ncpq,kc->nkpq", patch, wg[:, :, ri, si], optimize=True)
            out[:, gi * kg:(gi + 1) * kg] = acc
        if self.bias:
            out += to_float64(inputs["bias"], self.dtype)[None, :, None, None]
        return out if self.layout == "nchw" else out.transpose(0, 2, 3, 1)
