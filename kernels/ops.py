"""Operations as frozen values: validated at construction, with FLOP and byte counts, fresh random
inputs (never zeros), float64 NumPy references and the same references in plain C (an exported package's check).

A bad size raises ``BadInputError`` naming the field (fields.py), so ``tracea bench gemm --m 0`` stops with one
line before anything is built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from tracea.doctor.errors import BadInputError

from . import fields
from .dtypes import DType, parse_dtype, to_float64, to_storage
from .epilogue import EPILOGUES, GELU_C0, GELU_C1, NUMPY, flops_per_element, statements
from .epilogue import apply as apply_epilogue

SCHEMA_VERSION = 1
LAYOUTS = ("row", "col")
CONV_LAYOUTS = ("nchw", "nhwc")


class Op:
    """Common behaviour of the operations (frozen dataclasses). Beside its counts and references, an op
    answers how it is shown: its case in a few characters (``case_label``), a metrics row's shape
    (``shape_label``), its marker on the roofline plot (``plot_marker``) and the Tessera phase its kernel
    runs in (``phase``, one of emitters/nvtx.py's PHASES). ``default_shape``: the fields ``tracea.Context``
    assumes when a caller names the op without them; ``aliases``: other spellings of its name (``register``
    adds them to ``OP_ALIASES``)."""

    kind: ClassVar[str]
    plot_marker: ClassVar[str] = "o"
    phase: ClassVar[str] = "host"
    default_shape: ClassVar[dict[str, Any]] = {}
    aliases: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)  # type: ignore[call-overload]
        for k, v in d.items():
            if isinstance(v, DType):
                d[k] = v.value
            elif isinstance(v, tuple):
                d[k] = list(v)
        return {"op": self.kind, "schema_version": SCHEMA_VERSION, **d}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Op:
        """The op of ``data`` (from a bundle, a recorded space or a database: untrusted), validated."""
        if not isinstance(data, dict):
            raise BadInputError(f"op: expected an object, got {type(data).__name__}")
        data = dict(data)
        kind = data.pop("op", None)
        if data.pop("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise BadInputError("op: unsupported schema_version")
        cls = OPS.get(canonical_op_name(kind)) if isinstance(kind, str) else None
        if cls is None:
            raise BadInputError(f"op: unknown operation {kind!r}; known: {', '.join(OPS)}")
        for k, v in data.items():
            if isinstance(v, list):
                data[k] = tuple(v)
        try:
            return cls(**data)
        except TypeError as exc:
            raise BadInputError(f"{kind}: {exc}") from None

    @property
    def signature(self) -> str:
        """A stable one-line key for caches and databases."""
        parts = [f"{k}={v.value if isinstance(v, DType) else v}" for k, v in asdict(self).items()]  # type: ignore[call-overload]
        return f"{self.kind}(" + ",".join(parts) + ")"

    def case_label(self) -> str:
        """A case in a few characters, for a suite's table and progress line: the signature unless the
        op says it shorter."""
        return self.signature

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        """A short label for a metrics row's shape (the op's fields but ``dtype``, as JSON holds them; a
        field may be missing): its scalar fields unless the op says it shorter."""
        return ",".join(f"{k}={v}" for k, v in sorted(shape.items()) if not isinstance(v, (list, dict)))

    def extent(self) -> str:
        """The op's size in a few characters, for an exported package's default prefix: its output's shape
        unless the op says it otherwise."""
        return "x".join(map(str, self.output_shape()))  # type: ignore[attr-defined]

    def c_reference(self, epilogue: Mapping[str, str]) -> str | None:
        """The op's reference in plain C, for an exported package's example (naive loops, double
        accumulation): the body of a function of double arrays named as its buffers that fills ``ref``, its
        lines after the first indented as example.c's function body holds them (the package's bytes).
        ``epilogue``: the C statement of each fused-epilogue step (emitters/cstyle.py's ``C_REFERENCE``).
        None: the op has none, so a package cannot check it, and export refuses it."""
        return None


OPS: dict[str, type] = {}  # kind -> class, in registration order (kernels/__init__.py imports the ops' files)
# Other spellings of an op's name (its ``aliases``): the design documents write
# ctx.plan_kernel("flash_attention_2", precision="BF16").
OP_ALIASES: dict[str, str] = {}
OpT = TypeVar("OpT", bound=Op)


def register(cls: type[OpT]) -> type[OpT]:
    """Make ``cls`` an op: ``Op.from_json``, the CLI's IR and the reports find it in ``OPS`` by its kind,
    and by its aliases through ``canonical_op_name``. Each op's file registers its class (``@register``)."""
    OPS[cls.kind] = cls
    OP_ALIASES.update(dict.fromkeys(cls.aliases, cls.kind))
    return cls


@register
@dataclass(frozen=True)
class Gemm(Op):
    """C[m, n] = epilogue(A[m, k] @ B[k, n]). ``layout_a``/``layout_b``: "row" (k contiguous for A,
    n contiguous for B) or "col". Epilogue ops apply in order: bias (length n), relu, gelu (tanh),
    scale (by ``alpha``), residual (add an m x n tensor)."""

    m: int
    n: int
    k: int
    dtype: DType = DType.FP32
    layout_a: str = "row"
    layout_b: str = "row"
    epilogue: tuple[str, ...] = ()
    alpha: float = 1.0
    kind: ClassVar[str] = "gemm"
    phase: ClassVar[str] = "mma"
    default_shape: ClassVar[dict[str, Any]] = {"m": 4096, "n": 4096, "k": 4096}

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            object.__setattr__(self, name, fields.positive(name, getattr(self, name)))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        for name in ("layout_a", "layout_b"):
            if getattr(self, name) not in LAYOUTS:
                raise BadInputError(f"{name}: expected 'row' or 'col', got {getattr(self, name)!r}")
        epi = tuple(self.epilogue.split(",")) if isinstance(self.epilogue, str) else tuple(self.epilogue)
        if not all(isinstance(e, str) for e in epi):
            raise BadInputError(f"epilogue: expected op names, got {self.epilogue!r}")
        epi = tuple(e.strip() for e in epi if e.strip())
        for e in epi:
            if e not in EPILOGUES:
                raise BadInputError(f"epilogue: unknown op {e!r}; choose from {', '.join(EPILOGUES)}")
        if len(set(epi)) != len(epi):
            raise BadInputError(f"epilogue: an op appears twice in {','.join(epi)}")
        object.__setattr__(self, "epilogue", epi)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float, np.number)):
            raise BadInputError(f"alpha: expected a number, got {self.alpha!r}")
        if not math.isfinite(float(self.alpha)):
            raise BadInputError(f"alpha: must be finite, got {self.alpha}")
        object.__setattr__(self, "alpha", float(self.alpha))
        fields.elements("A (m x k)", self.m, self.k)
        fields.elements("B (k x n)", self.k, self.n)
        fields.elements("C (m x n)", self.m, self.n)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k + flops_per_element(self.epilogue) * self.m * self.n

    @property
    def bytes(self) -> int:
        """The fewest bytes a kernel moves: each input read once, the output written once."""
        size = self.dtype.itemsize
        total = (self.m * self.k + self.k * self.n + self.m * self.n) * size
        total += self.n * size if "bias" in self.epilogue else 0
        total += self.m * self.n * size if "residual" in self.epilogue else 0
        return total

    def shapes(self) -> dict[str, tuple[int, ...]]:
        s = {
            "a": (self.m, self.k) if self.layout_a == "row" else (self.k, self.m),
            "b": (self.k, self.n) if self.layout_b == "row" else (self.n, self.k),
        }
        if "bias" in self.epilogue:
            s["bias"] = (self.n,)
        if "residual" in self.epilogue:
            s["residual"] = (self.m, self.n)
        return s

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        # Scale so each dot product has unit variance whatever k is (fp16 stays in range).
        scale = 1.0 / math.sqrt(math.sqrt(self.k))
        return {name: fields.random(rng, shape, self.dtype, scale if name in ("a", "b") else 1.0)
                for name, shape in self.shapes().items()}

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        a = to_float64(inputs["a"], self.dtype)
        b = to_float64(inputs["b"], self.dtype)
        a = a if self.layout_a == "row" else a.T
        b = b if self.layout_b == "row" else b.T
        extra = {k: to_float64(inputs[k], self.dtype) for k in ("bias", "residual") if k in inputs}
        if "bias" in extra:
            extra["bias"] = extra["bias"][None, :]
        return apply_epilogue(self.epilogue, a @ b, extra, self.alpha, NUMPY)

    def extent(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def c_reference(self, epilogue: Mapping[str, str]) -> str:
        a = "a[i * K + p]" if self.layout_a == "row" else "a[p * M + i]"
        b = "b[p * N + j]" if self.layout_b == "row" else "b[j * K + p]"
        epi = statements(self.epilogue, epilogue, bias="bias[j]", residual="residual[i * N + j]")
        return f"""enum {{ M = {self.m}, N = {self.n}, K = {self.k} }};
    const double alpha = {self.alpha!r}, GELU_C0 = {GELU_C0!r}, GELU_C1 = {GELU_C1!r};
    (void)alpha; (void)GELU_C0; (void)GELU_C1;
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {{
            double v = 0;
            for (long p = 0; p < K; ++p) v += {a} * {b};
            {' '.join(epi)}
            ref[i * N + j] = v;
        }}"""

    def output_shape(self) -> tuple[int, ...]:
        return (self.m, self.n)

    def case_label(self) -> str:
        """gemm 1024x1024x1024 bf16 bias relu"""
        return f"gemm {self.m}x{self.n}x{self.k} {self.dtype.value}" + "".join(f" {e}" for e in self.epilogue)

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        return f"{shape.get('m')}x{shape.get('n')}x{shape.get('k')}"


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


@register
@dataclass(frozen=True)
class Softmax(Op):
    """Row-wise softmax over the last axis of a rows x cols matrix, numerically stable."""

    rows: int
    cols: int
    dtype: DType = DType.FP32
    kind: ClassVar[str] = "softmax"
    plot_marker: ClassVar[str] = "^"
    phase: ClassVar[str] = "reduce"
    default_shape: ClassVar[dict[str, Any]] = {"rows": 4096, "cols": 4096}

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", fields.positive("rows", self.rows))
        object.__setattr__(self, "cols", fields.positive("cols", self.cols))
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        fields.elements("input (rows x cols)", self.rows, self.cols)

    @property
    def flops(self) -> int:
        # max, subtract, exp, sum, scale: 5 per element (an exp counted as one)
        return 5 * self.rows * self.cols

    @property
    def bytes(self) -> int:
        return 2 * self.rows * self.cols * self.dtype.itemsize

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {"x": (self.rows, self.cols)}

    def c_reference(self, epilogue: Mapping[str, str]) -> str:
        return f"""enum {{ ROWS = {self.rows}, COLS = {self.cols} }};
    for (long i = 0; i < ROWS; ++i) {{
        double mx = x[i * COLS], sum = 0;
        for (long j = 1; j < COLS; ++j) mx = x[i * COLS + j] > mx ? x[i * COLS + j] : mx;
        for (long j = 0; j < COLS; ++j) sum += exp(x[i * COLS + j] - mx);
        for (long j = 0; j < COLS; ++j) ref[i * COLS + j] = exp(x[i * COLS + j] - mx) / sum;
    }}"""

    def output_shape(self) -> tuple[int, ...]:
        return (self.rows, self.cols)

    def case_label(self) -> str:
        return f"softmax {self.rows}x{self.cols} {self.dtype.value}"

    @classmethod
    def shape_label(cls, shape: dict[str, Any]) -> str:
        return f"{shape.get('rows')}x{shape.get('cols')}"

    def random_inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        # A wide spread (and an offset) so that a kernel without the max subtraction overflows.
        x = rng.standard_normal((self.rows, self.cols), dtype=np.float32) * 4 + 40
        return {"x": to_storage(x, self.dtype)}

    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        x = to_float64(inputs["x"], self.dtype)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)


def canonical_op_name(name: str) -> str:
    """The IR kind (a key of OPS) for a user's op name; a name that is no alias comes back lower-cased,
    for the caller's "unknown operation" message."""
    key = str(name).strip().lower()
    return OP_ALIASES.get(key, key)


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; NaN or a shape mismatch is an infinite error."""
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape or not np.all(np.isfinite(out)):
        return math.inf
    denom = float(np.linalg.norm(ref))
    return float(np.linalg.norm(out - ref)) / (denom if denom > 0 else 1.0)


def tolerance(op: Op) -> float:
    """Relative-error bound for a correct kernel: the output's own rounding plus accumulation. Attention
    shares it: a 16-bit kernel rounds P before P @ V and then O, about 2u in all, inside 8u."""
    dtype: DType = op.dtype  # type: ignore[attr-defined]
    if dtype is DType.FP32:
        return 1e-4
    return 8 * dtype.unit_roundoff  # output rounding dominates: ~3e-2 bf16, ~4e-3 fp16


__all__ = ["Gemm", "Conv2d", "Softmax", "Op", "OPS", "OP_ALIASES", "DType", "canonical_op_name", "register", "relative_error",
           "tolerance"]
