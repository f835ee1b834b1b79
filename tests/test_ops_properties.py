"""Properties over every public name of ``tracea.ops`` (issue 30): whatever the arguments, a call returns a
result of its inputs' kind and dtype, or raises one of the errors docs/ops.md documents: ``BadInputError`` for
what the caller got wrong, ``UnsupportedError`` for what cannot run here (a fallback refused by
``allow_fallback(False)``, a float64 fallback too large for memory, the PyTorch pieces without torch), each one
line. Never another exception, never a kernel build that fails (the engine's "building ... failed" warning),
never a wrong answer: every call that returns is checked against a float64 NumPy reference written here, with
NaN and infinities exactly where NumPy has them, and its inputs are left as they were.

A call is drawn as a valid tiny one, then changed 0 to 2 times: an array of another dtype (float16/32/64,
longdouble, int8/32/64, uint8, bool, complex64/128, object, str, bytes, datetime64, structured), shape (0-d to
6-d, empty dimensions, mismatched sizes) or layout (Fortran order, strided, reversed, zero-stride broadcast,
read-only, unaligned); a non-array where an array goes (None, str, lists, nested lists, bools, 2**70, an
integer of 5000 digits, NaN, inf); a keyword set to an odd value (stride=0, padding=-1, epilogue strings with
odd characters, alpha="2", scale=nan, causal="yes", block masks of the wrong shape or dtype); an ``out=`` that
is right, of the wrong shape or dtype, read-only, Fortran-ordered, broadcast, or an input itself. A change that
no call may take (a non-float dtype, a non-array, a value of a keyword's "refused always" list, a wrong out)
must be a BadInputError, so a value silently read as something else (causal="yes" as True) fails too. Each
call is also asked of ``explain`` first (the same refusal, the same path, nothing built, no counter moved);
some clear the caches first, some run under ``allow_fallback(False)``; ``stats()`` must count what ran.

Examples (fixed: derandomized, no database; ``TRACEA_PROPERTY_SCALE=10`` runs ten times as many, freshly
random): 80 hostile calls for each of gemm, conv2d, softmax and attention; 25 valid calls each against NumPy
(every dtype the ops compute, every layout, ``out=``); NaN and infinities through the kernels in 12 gemm, 40
conv2d, 20 softmax and 15 attention calls; 40 for explain's op argument; 20 for allow_fallback; 20 for the
PyTorch pieces where torch is installed. Each keyword's odd values are also swept once each on a small valid
call, so a rare value is never left to chance, and what the properties found (some only at scale 15 or 40)
stays as fixed cases. Sizes are tiny and drawn from few values, so the CPU kernels (gcc, once per signature)
and the NumPy fallback both run: about 16 s of CPU on the 2-core CI machine, most of it compiling.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tracea import ops  # noqa: E402
from tracea.doctor.errors import BadInputError, UnsupportedError  # noqa: E402

DOCUMENTED = (BadInputError, UnsupportedError)
SCALE = int(os.environ.get("TRACEA_PROPERTY_SCALE", "1"))
HAS_TORCH = importlib.util.find_spec("torch") is not None


def props(examples: int) -> Any:
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=SCALE == 1, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large], print_blob=False)


# ------------------------------------------------------------------------------------------ hostile values

HUGE = 10**5000  # str() refuses it (more than 4300 digits): a message that shows it must not try
SCALARS: list[Any] = [
    None, True, False, 0, 1, -1, 2, 2**31, 2**70, -(2**63), HUGE, 0.0, -0.0, 0.5, 1.5, math.nan, math.inf,
    -math.inf, 1e308, 5e-324, np.float32("nan"), np.int64(2), np.bool_(True), 1j, "", "2", "yes", "nchw", "same",
    "bias,relu", "\x00", "\U0001f600" * 3, b"bytes", [], [1], [[1.0, 2.0], [3.0, 4.0]], [[[1]]], (1, 2), (1, 2, 3),
    {}, {"a": 1}, object(), Ellipsis, range(2), slice(1)]
FLOAT_DTYPES = ["float32", "float16", "float64", "longdouble"]
OTHER_DTYPES = ["int8", "int32", "int64", "uint8", "bool", "complex64", "complex128", "object", "U3", "S3",
                "datetime64[s]", "f4,f4"]
LAYOUTS = ["C", "F", "strided", "reversed", "broadcast", "readonly", "unaligned"]


def values(rng: np.random.Generator, shape: tuple[int, ...], specials: bool = False) -> np.ndarray:
    v = rng.standard_normal(shape)
    if specials and v.size:
        idx = rng.choice(v.size, size=max(1, v.size // 5), replace=False)
        v.flat[idx] = rng.choice([np.nan, np.inf, -np.inf], size=idx.size)
    return v


def typed(v: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return v > 0
    if dtype in ("int8", "int32", "int64", "uint8"):
        return np.abs(np.nan_to_num(v * 3, nan=0.0, posinf=9.0, neginf=9.0)).astype(dtype)
    if dtype == "datetime64[s]":
        return np.nan_to_num(v * 1000, nan=0.0, posinf=0.0, neginf=0.0).astype(np.int64).astype(dtype)
    if dtype == "f4,f4":
        return np.zeros(v.shape, dtype)
    return v.astype(dtype)


def laid(a: np.ndarray, layout: str) -> np.ndarray:
    """``a``'s values (a broadcast repeats one slice) in another memory layout."""
    if layout == "C" or a.ndim == 0:
        return a
    if layout == "F":
        return np.asfortranarray(a)
    if layout == "strided":
        return np.repeat(a, 2, axis=-1)[..., ::2]
    if layout == "reversed":
        return a[..., ::-1].copy()[..., ::-1]
    if layout == "readonly":
        r = a.copy()
        r.flags.writeable = False
        return r
    if layout == "unaligned":  # one byte into its buffer
        if a.dtype.kind not in "biufc":
            return a
        r = np.zeros(a.nbytes + 1, np.uint8)[1:].view(a.dtype).reshape(a.shape)
        r[...] = a
        return r
    axes = [i for i, d in enumerate(a.shape) if d > 1]  # "broadcast": zero strides along one axis
    return np.broadcast_to(np.take(a, [0], axis=axes[-1]), a.shape) if axes else a


SHAPES = st.lists(st.sampled_from([0, 1, 1, 2, 3]), min_size=0, max_size=6).map(tuple)


@st.composite
def hostile_value(draw: Any) -> Any:
    """Something that is not the array a call wants: a scalar or container, or an array of any dtype and rank."""
    if draw(st.booleans()):
        return draw(st.sampled_from(SCALARS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(FLOAT_DTYPES + OTHER_DTYPES))
    return laid(typed(values(rng, draw(SHAPES)), dtype), draw(st.sampled_from(LAYOUTS)))


# ------------------------------------------------------------------------------------- calls, as values

POSITIONAL = {"gemm": ("a", "b"), "conv2d": ("x", "weight"), "softmax": ("x",), "attention": ("q", "k", "v")}
SPECIALS = {"gemm": ("a", "b", "bias", "residual"), "conv2d": ("x", "bias"), "softmax": ("x",),
            "attention": ("q", "k")}  # where NaN and inf go: the semantics of a NaN weight under padding or a
#                                       NaN value under a masked key are the implementation's, not NumPy's
FUNCS: dict[str, Callable[..., Any]] = {"gemm": ops.gemm, "conv2d": ops.conv2d, "softmax": ops.softmax,
                                        "attention": ops.attention}


@dataclass
class Call:
    op: str
    arrays: dict[str, Any]  # the array arguments by name (a hostile value may stand in for one)
    params: dict[str, Any]  # the other keyword arguments
    changes: list[str] = field(default_factory=list)
    bad: dict[str, bool] = field(default_factory=dict)  # per argument: changed to what no call may take

    @property
    def refused(self) -> bool:
        """A change no call may take: the call must raise BadInputError."""
        return any(self.bad.values())

    def split(self) -> tuple[list[Any], dict[str, Any]]:
        pos = [self.arrays[n] for n in POSITIONAL[self.op]]
        return pos, {n: v for n, v in self.arrays.items() if n not in POSITIONAL[self.op]} | self.params

    def __repr__(self) -> str:  # one line per call in an assertion's message
        def one(v: Any) -> str:
            if isinstance(v, np.ndarray):
                return (f"array{v.shape} {v.dtype} strides={v.strides} c={v.flags.c_contiguous} "
                        f"w={v.flags.writeable} nan={np.isnan(v).sum() if v.dtype.kind == 'f' else '-'}")
            text = repr(v) if not isinstance(v, int) or abs(v) < 10**100 else "<huge int>"
            return text[:80]
        items = {**self.arrays, **self.params}
        return f"{self.op}({', '.join(f'{k}={one(v)}' for k, v in items.items())}) changes={self.changes}"


def _any_layout(draw: Any) -> str:
    return draw(st.sampled_from(["C"] * 6 + LAYOUTS[1:]))


@st.composite
def gemm_call(draw: Any, rng: np.random.Generator, dtype: str, specials: bool, varied: bool) -> Call:
    m, k, n = (draw(st.sampled_from(v)) for v in ([1, 3, 8], [1, 4, 8], [1, 5, 8]))
    batch = draw(st.sampled_from([(), (), (), (2,)])) if varied else ()
    a_shape, b_shape = (*batch, m, k), (*draw(st.sampled_from([batch, ()])), k, n)
    out_shape = (*batch, m, n)
    epilogue = draw(st.sampled_from([None, None, "relu", "bias,gelu", "scale,residual", ("bias", "relu", "residual"),
                                     " gelu , scale ", "relu,gelu", *(["bias,bias"] if varied else [])]))
    shapes = {"a": a_shape, "b": b_shape}
    if epilogue is None:
        chain: list[str] = [name for name in ("bias", "residual") if draw(st.booleans())]
        alpha = draw(st.sampled_from([1.0, 1.0, 0.5, np.float32(-2.0), 3]))
    else:
        chain = [e.strip() for e in (epilogue.split(",") if isinstance(epilogue, str) else epilogue)]
        alpha = draw(st.sampled_from([1.0, 0.5, -2, np.float64(0.25)])) if "scale" in chain else 1.0
    if "bias" in chain:
        shapes["bias"] = (n,)
    if "residual" in chain:
        shapes["residual"] = out_shape
    arrays = {name: laid(typed(values(rng, shape, specials), dtype), _any_layout(draw) if varied else "C")
              for name, shape in shapes.items()}
    params: dict[str, Any] = {}
    if epilogue is not None or draw(st.booleans()):
        params["epilogue"] = epilogue
    if alpha != 1.0 or draw(st.booleans()):
        params["alpha"] = alpha
    return Call("gemm", arrays, params)


@st.composite
def conv2d_call(draw: Any, rng: np.random.Generator, dtype: str, specials: bool, varied: bool) -> Call:
    n, groups, cg = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 1, 2])), draw(st.sampled_from([1, 3]))
    c, k = cg * groups, groups * draw(st.sampled_from([1, 2]))
    r, s = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 2, 3]))
    stride, dilation = draw(st.sampled_from([1, 1, 1, 2, (1, 2)])), draw(st.sampled_from([1, 1, 2]))
    padding = draw(st.sampled_from([0, 1, (1, 0), (0, 1), 2, "valid", "same"] if varied else [0, 1, (0, 1), 2]))
    if padding == "same" and stride != 1:
        padding = 1
    h = max(draw(st.sampled_from([3, 5])), dilation * (r - 1) + 1)
    w = max(draw(st.sampled_from([4, 6])), dilation * (s - 1) + 1)
    layout = draw(st.sampled_from(["nchw", "nchw", "nhwc", "NHWC"]))
    nhwc = layout.lower() == "nhwc"
    shapes = {"x": (n, h, w, c) if nhwc else (n, c, h, w), "weight": (k, r, s, cg) if nhwc else (k, cg, r, s)}
    if draw(st.booleans()):
        shapes["bias"] = (k,)
    arrays = {name: laid(typed(values(rng, shape, specials and name in SPECIALS["conv2d"]), dtype),
                         _any_layout(draw) if varied else "C") for name, shape in shapes.items()}
    params = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups, "layout": layout}
    defaults = {"stride": 1, "padding": 0, "dilation": 1, "groups": 1, "layout": "nchw"}
    return Call("conv2d", arrays, {p: v for p, v in params.items() if v != defaults[p] or draw(st.booleans())})


@st.composite
def softmax_call(draw: Any, rng: np.random.Generator, dtype: str, specials: bool, varied: bool) -> Call:
    shape = tuple(draw(st.lists(st.sampled_from([1, 3, 8, 17]), min_size=1, max_size=3)))
    dim = draw(st.sampled_from([-1, -1, len(shape) - 1, 0, np.int64(-1)] if varied else [-1, len(shape) - 1]))
    x = laid(typed(values(rng, shape, specials), dtype), _any_layout(draw) if varied else "C")
    return Call("softmax", {"x": x}, {"dim": dim} if draw(st.booleans()) or dim != -1 else {})


def _mask_form(draw: Any, bm: np.ndarray) -> Any:
    form = draw(st.sampled_from(["array", "array", "lists", "strings"]))
    if form == "lists":
        return [[bool(b) for b in row] for row in bm]
    if form == "strings":
        return ["".join("1" if b else "0" for b in row) for row in bm]
    return bm


@st.composite
def attention_call(draw: Any, rng: np.random.Generator, dtype: str, specials: bool, varied: bool) -> Call:
    b, hkv, group = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    sq, sk = draw(st.sampled_from([1, 4, 9])), draw(st.sampled_from([1, 4, 9]))
    d = draw(st.sampled_from([8, 8, 16, 12] if not specials else [8, 16]))
    shapes = {"q": (b, hkv * group, sq, d), "k": (b, hkv, sk, d), "v": (b, hkv, sk, d)}
    arrays = {name: laid(typed(values(rng, shape, specials and name in SPECIALS["attention"]), dtype),
                         _any_layout(draw) if varied else "C") for name, shape in shapes.items()}
    params: dict[str, Any] = {}
    for name, pool in (("causal", [False, True, np.bool_(True)]), ("scale", [None, 0.5, np.float32(0.25), 2]),
                       ("window", [None, (2, 1), 0, (0, 3)])):
        if draw(st.booleans()):
            params[name] = draw(st.sampled_from(pool))
    if draw(st.integers(0, 2)) == 0:
        bsize = draw(st.sampled_from([(4, 4), (2, 8), 3, (128, 128)]))
        bq, bk = bsize if isinstance(bsize, tuple) else (bsize, bsize)
        params["block_size"] = bsize
        params["block_mask"] = _mask_form(draw, rng.random((-(-sq // bq), -(-sk // bk))) < 0.7)
    return Call("attention", arrays, params)


BUILDERS = {"gemm": gemm_call, "conv2d": conv2d_call, "softmax": softmax_call, "attention": attention_call}

# Each keyword's odd values: (refused always, maybe taken). A call given one of the first must raise
# BadInputError, so a value that is silently read some other way (causal="yes" as True) fails the property.
POOLS: dict[str, dict[str, tuple[list[Any], list[Any]]]] = {
    "gemm": {
        "epilogue": (["relu;rm", "RELU", "\x00relu", "\U0001f600", ["relu", 3], b"relu", 5, {"relu"}, 1j, object(),
                      HUGE, math.nan, ("relu", None)],
                     ["", ",", " , ", "relu,,gelu", "bias", "residual", "gelu,gelu,gelu", "relu\n", ["relu"],
                      ("gelu",), [], "scale", "bias,relu,residual,scale", *SCALARS]),
        "alpha": (["2", math.nan, math.inf, -math.inf, True, None, 1j, HUGE, [1], np.float32("inf"), "1e308"],
                  [2**70, 1e308, np.float16(2), 0, -1, np.longdouble(2), *SCALARS]),
    },
    "conv2d": {
        "stride": ([0, -1, 2**31, 2**70, HUGE, True, 1.0, "1", (1,), (1, 2, 3), (0, 1), None, np.array([1, 1])],
                   [2**31 - 1, [2, 2], np.int64(2), (np.int8(1), 2)]),
        "padding": ([-1, "SAME", "full", "", (1,), (1, -1), 2**31, 2**70, HUGE, 1.5, None, True, [], [[1]],
                     np.array([1, 1])],
                    ["same", "valid", np.int8(1), (np.int64(1), 0), 2]),
        "dilation": ([0, -1, 2**31, (1, 0), 1.0, "2", None, True, HUGE], [3, (2, 2)]),
        "groups": ([0, -1, True, 1.0, "1", 2**70, HUGE, None], [2, 3, np.int32(1), np.int64(2)]),
        "layout": (["nchw ", "", None, 1, ["nchw"], "channels_last", "ncwh", b"nchw", HUGE], ["NCHW", "nhwc"]),
    },
    "softmax": {
        "dim": ([2**70, -(2**70), HUGE, True, False, 1.0, "0", None, [0], (0,)],
                [-3, 3, 1, -2, np.int64(0), np.uint8(0)]),
    },
    "attention": {
        "causal": (["yes", "", None, 0, 1, 1.0, np.array([True]), [True], "False", HUGE], [np.bool_(True)]),
        "scale": ([math.nan, math.inf, -math.inf, 0, -1, "2", HUGE, True, [1], np.float64("nan"), 1j],
                  [2**70, np.float32(0.5), 1e-320, 1e300]),
        "window": ([-1, (1,), (1, 2, 3), "1", 2**31, (2**70, 1), 1.5, True, (True, 1), np.array([1, 2])],
                   [(0, 0), 0]),
        "block_size": ([0, -1, (1,), (0, 4), 2**31, "8", True, 2.0], [1, (1, 1), (2, 2)]),
        "block_mask": ([np.ones(3, bool), np.ones((1, 1, 1), bool), np.ones((1, 1)), np.ones((1, 1), object),
                        np.ones((1, 1), np.int8), [[1]], ["1", "0x"], "1", [], [[]], [[True], [True, False]], True,
                        HUGE, [[HUGE]]],
                       [np.ones((3, 3), bool), np.zeros((0, 0), bool), [[True]], ["1"], np.ones((1, 1), bool),
                        [[np.bool_(True)]], np.ones((2, 2), bool)[:, ::2]]),
    },
}
EXTRA_ARRAYS = {"gemm": ("bias", "residual"), "conv2d": ("bias",), "softmax": (), "attention": ()}


@st.composite
def changed(draw: Any, call: Call, rng: np.random.Generator) -> Call:
    """``call`` with one thing changed (see the module docstring)."""
    kind = draw(st.sampled_from(["dtype", "layout", "shape", "value", "param", "param", "param", "array", "out"]))
    names = list(call.arrays)
    name = draw(st.sampled_from(names))
    old = call.arrays[name]
    if kind == "dtype" and isinstance(old, np.ndarray):
        dtype = draw(st.sampled_from(FLOAT_DTYPES + OTHER_DTYPES))
        call.arrays[name] = typed(values(rng, old.shape), dtype)
        call.bad[name] = dtype in OTHER_DTYPES
    elif kind == "layout" and isinstance(old, np.ndarray):
        layout = draw(st.sampled_from(LAYOUTS))
        call.arrays[name] = laid(old, layout)
        name = f"{name} {layout}"
    elif kind == "shape" and isinstance(old, np.ndarray):
        shape = list(old.shape)
        how = draw(st.sampled_from(["size", "size", "drop", "add", "any"]))
        if how == "size" and shape:
            shape[draw(st.integers(0, len(shape) - 1))] = draw(st.sampled_from([0, 1, 2, 5]))
        elif how == "drop" and shape:
            shape.pop(draw(st.integers(0, len(shape) - 1)))
        elif how == "add":
            shape.insert(draw(st.integers(0, len(shape))), draw(st.sampled_from([0, 1, 2])))
        else:
            shape = list(draw(SHAPES))
        call.arrays[name] = typed(values(rng, tuple(shape)), str(old.dtype) if old.dtype.kind == "f" else "float32")
        call.bad[name] = False
        name = f"{name} {tuple(shape)}"
    elif kind == "value":
        value = call.arrays[name] = draw(hostile_value())
        call.bad[name] = not isinstance(value, np.ndarray) and (value is not None or name in POSITIONAL[call.op])
    elif kind == "param":
        pname = draw(st.sampled_from(sorted(POOLS[call.op])))
        bad, odd = POOLS[call.op][pname]
        value = call.params[pname] = draw(st.sampled_from(bad + odd))
        call.bad[pname] = any(value is b for b in bad)
        name = pname
    elif kind == "array" and EXTRA_ARRAYS[call.op]:
        name = draw(st.sampled_from(EXTRA_ARRAYS[call.op]))
        call.arrays[name] = draw(st.one_of(hostile_value(), st.builds(lambda s: np.ones(s, np.float32), SHAPES)))
        call.bad[name] = False
    elif kind == "out":
        how = draw(st.sampled_from(["right", "right", "dtype", "shape", "fortran", "readonly", "broadcast", "input",
                                    "list"]))
        call.params["out"] = draw(out_value(call, how))
        call.bad["out"] = how in ("dtype", "shape", "readonly", "broadcast", "list") or (
            how == "input" and any(call.params["out"] is a for a in call.arrays.values()))
        name = f"out {how}"
    if kind in ("dtype", "shape", "value", "array"):  # a wrong out may be right for the arrays now
        call.bad.pop("out", None)
    call.changes.append(f"{kind}:{name}")
    return call


@st.composite
def out_value(draw: Any, call: Call, kind: str) -> Any:
    """An ``out=`` for ``call``: right, wrong in one way (``kind``), or an input itself."""
    try:
        shape = reference(call).shape
    except Exception:  # noqa: BLE001 - a call the reference cannot read: any out will do
        shape = draw(SHAPES)
    first = call.arrays[POSITIONAL[call.op][0]]
    dtype = first.dtype if isinstance(first, np.ndarray) else np.dtype(np.float32)
    if kind == "right":
        return np.full(shape, np.nan, dtype) if dtype.kind == "f" else np.empty(shape, dtype)
    if kind == "dtype":
        return np.empty(shape, np.float64 if dtype != np.float64 else np.float32)
    if kind == "shape":
        return np.empty((*shape, 1), dtype)
    if kind == "fortran":
        return np.asfortranarray(np.empty(shape, dtype))
    if kind == "readonly":
        return laid(np.empty(shape, dtype), "readonly")
    if kind == "broadcast":
        return np.broadcast_to(np.empty((), dtype), shape)
    if kind == "input":  # the result written over an input of its shape and dtype: refused (it overlaps)
        same = [a for a in call.arrays.values() if isinstance(a, np.ndarray) and a.shape == tuple(shape)
                and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable]
        return same[0] if same else np.empty(shape, dtype)
    return [[0.0]]


# -------------------------------------------------------------------------------- the NumPy references


def f64(x: Any) -> np.ndarray:
    assert isinstance(x, np.ndarray) and x.dtype.kind == "f", f"the reference reads float arrays, got {type(x)}"
    return x.astype(np.float64)


def pair(v: Any) -> tuple[int, int]:
    return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))


def gemm_ref(a: Any, b: Any, bias: Any = None, residual: Any = None, epilogue: Any = None,
             alpha: Any = 1.0) -> np.ndarray:
    c = np.matmul(f64(a), f64(b))
    if epilogue is None:
        chain = [*(["bias"] if bias is not None else []), *(["scale"] if float(alpha) != 1.0 else []),
                 *(["residual"] if residual is not None else [])]
    else:
        chain = [e.strip() for e in (epilogue.split(",") if isinstance(epilogue, str) else epilogue) if e.strip()]
    for e in chain:
        if e in ("bias", "residual"):
            c = c + f64(bias if e == "bias" else residual)
        elif e == "scale":
            c = c * float(alpha)
        elif e == "relu":
            c = np.maximum(c, 0.0)  # a NaN stays NaN
        elif e == "gelu":  # the tanh form, as kernels/epilogue.py defines it
            c = 0.5 * c * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (c + 0.044715 * c**3)))
        else:
            raise AssertionError(f"epilogue op {e!r}")
    return c


def conv2d_ref(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
               groups: Any = 1, layout: Any = "nchw") -> np.ndarray:
    xs, ws = f64(x), f64(weight)
    nhwc = layout.lower() == "nhwc"
    if nhwc:
        xs, ws = xs.transpose(0, 3, 1, 2), ws.transpose(0, 3, 1, 2)
    (n, c, h, w), (k, cg, r, s) = xs.shape, ws.shape
    (sh, sw), (dh, dw), g = pair(stride), pair(dilation), int(groups)
    assert c == cg * g
    if padding == "valid":
        pads = (0, 0, 0, 0)
    elif padding == "same":
        th, tw = dh * (r - 1), dw * (s - 1)
        pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    else:
        ph, pw = pair(padding)
        pads = (ph, ph, pw, pw)
    xp = np.pad(xs, ((0, 0), (0, 0), pads[:2], pads[2:]))
    p = (h + pads[0] + pads[1] - dh * (r - 1) - 1) // sh + 1
    q = (w + pads[2] + pads[3] - dw * (s - 1) - 1) // sw + 1
    xg = xp.reshape(n, g, cg, *xp.shape[2:])
    wg = ws.reshape(g, k // g, cg, r, s)
    y = np.zeros((n, g, k // g, p, q))
    for i in range(r):
        for j in range(s):
            patch = xg[..., i * dh: i * dh + sh * (p - 1) + 1: sh, j * dw: j * dw + sw * (q - 1) + 1: sw]
            y += np.einsum("ngcpq,gkc->ngkpq", patch, wg[..., i, j])
    y = y.reshape(n, k, p, q)
    if bias is not None:
        y = y + f64(bias)[None, :, None, None]
    return y.transpose(0, 2, 3, 1) if nhwc else y


def softmax_ref(x: Any, dim: Any = -1) -> np.ndarray:
    v = f64(x)
    if v.size == 0:  # nothing to reduce: an empty result, as NumPy gives one
        return v
    e = np.exp(v - v.max(axis=int(dim), keepdims=True))
    return e / e.sum(axis=int(dim), keepdims=True)


def _mask_array(mask: Any) -> np.ndarray:
    if isinstance(mask, np.ndarray):
        return mask.astype(bool)
    return np.array([[ch == "1" for ch in row] if isinstance(row, str) else [bool(b) for b in row] for row in mask],
                    dtype=bool)


def attention_ref(q: Any, k: Any, v: Any, causal: Any = False, scale: Any = None, window: Any = None,
                  block_mask: Any = None, block_size: Any = (128, 128)) -> np.ndarray:
    """softmax over the keys each row keeps (bottom-right causal diagonal, window, block mask), a row that
    keeps none 0; NaN and inf as the float64 arithmetic gives them."""
    qs, ks, vs = f64(q), f64(k), f64(v)
    b, h, sq, d = qs.shape
    hkv, sk = ks.shape[1], ks.shape[2]
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(d) if d else 1.0
    rows, cols = np.arange(sq)[:, None], np.arange(sk)[None, :]
    diag = cols - rows - (sk - sq)
    keep = np.ones((sq, sk), bool)
    if causal:
        keep &= diag <= 0
    if window is not None:
        left, right = pair(window)
        keep &= (diag >= -left) & (diag <= right)
    if block_mask is not None:
        bq, bk = pair(block_size)
        keep &= _mask_array(block_mask)[rows // bq, cols // bk]
    out = np.zeros((b, h, sq, d))
    for bi in range(b):
        for hi in range(h):
            kv = hi // (h // hkv)
            s = qs[bi, hi] @ ks[bi, kv].T * sc
            for row in range(sq):
                kept = keep[row]
                if kept.any():
                    e = np.exp(s[row, kept] - s[row, kept].max())
                    out[bi, hi, row] = (e / e.sum()) @ vs[bi, kv][kept]
    return out


REFS: dict[str, Callable[..., np.ndarray]] = {"gemm": gemm_ref, "conv2d": conv2d_ref, "softmax": softmax_ref,
                                              "attention": attention_ref}


def reference(call: Call) -> np.ndarray:
    pos, kw = call.split()
    kw.pop("out", None)
    with np.errstate(all="ignore"):
        return REFS[call.op](*pos, **kw)


TOLERANCE = {"float16": 8 * 2.0**-11, "float32": 1e-4}  # else (float64, longdouble: the float64 fallback) 1e-9


def assert_like(got: np.ndarray, want: np.ndarray, what: Any) -> None:
    """NaN exactly where the reference has NaN, the same infinities, and elsewhere finite and within the
    dtype's tolerance (a relative error of the whole result), the reference rounded to the result's dtype."""
    g = np.asarray(got, dtype=np.float64)
    with np.errstate(all="ignore"):
        w = want.astype(got.dtype).astype(np.float64)
    assert g.shape == w.shape, what
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan), (what, "NaN where NumPy has none, or none where it has",
                                              np.argwhere(np.isnan(g) != nan)[:4].tolist())
    inf = np.isinf(w)
    assert np.array_equal(g[inf], w[inf]), (what, "infinities differ")
    fin = ~nan & ~inf
    assert np.isfinite(g[fin]).all(), (what, "an infinity where NumPy's result is finite")
    if fin.any():
        err = float(np.linalg.norm(g[fin] - w[fin])) / max(float(np.linalg.norm(w[fin])), 1e-30)
        assert err <= TOLERANCE.get(got.dtype.name, 1e-9), (what, f"relative error {err:.3g}")


# ------------------------------------------------------------------------------------------ the checks

PATHS: dict[str, list[str]] = {}  # what each property's calls ran: "tracea", "fallback", "empty", "error"


def one_line(exc: BaseException) -> None:
    assert isinstance(exc, DOCUMENTED), f"{type(exc).__name__}: {exc}"
    message = str(exc)
    assert message and "\n" not in message and len(message) < 500, repr(message)


def _sane(call: Call) -> bool:
    """No number a float32 kernel cannot hold (alpha=1e308 overflows, scale=1e-320 is 0 there): with one,
    only the result's kind, dtype and shape are checked."""
    for v in call.params.values():
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and v != 0:
            try:
                f = abs(float(v))
            except OverflowError:
                return False
            if not 1e-30 < f < 1e30:
                return False
    return True


def check(call: Call, strict: bool = False, clear: bool = False, must_run: bool = False) -> str:
    """Run ``call`` as explain and as a call; returns the path the call took, or "error"."""
    fn = FUNCS[call.op]
    pos, kw = call.split()
    out = kw.get("out")
    before = {n: a.copy() for n, a in call.arrays.items()
              if isinstance(a, np.ndarray) and a.dtype.kind in "fc" and a is not out}
    try:
        want = reference(call)
    except Exception:  # noqa: BLE001 - arguments the reference cannot read: the call must refuse them too
        want = None
    counts = ops.stats()
    try:
        route = ops.explain(fn, *pos, **kw)
        refused = None
    except Exception as exc:  # noqa: BLE001 - checked on the next line
        one_line(exc)
        route, refused = None, exc
    if route is not None:
        assert isinstance(route, ops.Route) and route.path in ("tracea", "fallback", "empty"), route
        assert str(route).startswith(call.op), str(route)
    assert ops.stats() == counts, "explain built or counted something"
    if clear:
        ops.clear_cache()
    counts = ops.stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops.allow_fallback(not strict)
        try:
            result, error = fn(*pos, **kw), None
        except Exception as exc:  # noqa: BLE001 - checked below
            result, error = None, exc
        finally:
            ops.allow_fallback(True)
    broken = [str(w.message) for w in caught if "tracea.ops: building" in str(w.message)]
    assert not broken, broken
    if error is not None:
        assert not must_run, f"a valid call was refused: {type(error).__name__}: {error}"
        one_line(error)
        assert isinstance(error, BadInputError) or not call.refused, f"refused, but not as bad input: {error}"
        if isinstance(error, BadInputError):
            assert isinstance(refused, BadInputError), f"explain took what the call refused ({error})"
        else:
            assert (strict and route is not None and (route.path == "fallback" or "refused these buffers" in str(error))
                    ) or "would need" in str(error), f"an UnsupportedError not asked for: {error}"
        return "error"
    assert refused is None, f"explain refused what the call took: {refused}"
    assert not call.refused, f"a call took what it must refuse: {call.changes}"
    assert isinstance(result, np.ndarray), type(result)
    assert result.dtype == pos[0].dtype, (result.dtype, pos[0].dtype)
    if out is not None:
        assert result is out
    last = ops.explain()
    assert last.path == route.path or last.reason.startswith("the kernel refused these buffers"), (route, last)
    now = ops.stats()
    assert all(isinstance(v, int) and v >= 0 for v in now.values()), now
    if last.path in ("tracea", "fallback"):
        key = "tracea" if last.path == "tracea" else "fallbacks"
        assert now.get(key, 0) == counts.get(key, 0) + 1, (last.path, counts, now)
    if strict:
        assert last.path != "fallback"
    for name, copy in before.items():
        assert np.array_equal(call.arrays[name], copy, equal_nan=True), f"the call wrote its input {name}"
    assert want is not None, f"the call took arguments the reference cannot read: {call}"
    assert result.shape == want.shape, (result.shape, want.shape)
    if _sane(call):
        assert_like(result, want, call)
    return last.path


# ---------------------------------------------------------------------------------------- the properties

OPS = sorted(FUNCS)


def _drawn_call(data: Any, op: str, float32_weight: int) -> tuple[Any, str, Any]:
    """(rng, dtype, call): a seeded generator and a valid call of ``op`` in ``dtype``, float32 drawn ``float32_weight`` times as
    often as each other float dtype, with or without special values."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    dtype = data.draw(st.sampled_from(["float32"] * float32_weight + FLOAT_DTYPES[1:]), label="dtype")
    return rng, dtype, data.draw(BUILDERS[op](rng, dtype, data.draw(st.booleans(), label="specials"), True))


@pytest.mark.parametrize("op", OPS)
def test_no_argument_makes_an_internal_error(op: str) -> None:
    paths = PATHS.setdefault(f"hostile {op}", [])

    @props(80)
    @given(data=st.data())
    def prop(data: Any) -> None:
        rng, _, call = _drawn_call(data, op, 4)
        for _ in range(data.draw(st.sampled_from([0, 1, 1, 2]), label="changes")):
            call = data.draw(changed(call, rng))
        strict, clear = data.draw(st.integers(0, 5)) == 0, data.draw(st.integers(0, 9)) == 0
        paths.append(check(call, strict=strict, clear=clear))

    prop()
    assert {"tracea", "fallback", "error"} <= set(paths), paths


def _base(op: str) -> Call:
    """One small valid call of ``op``, whose keywords are left to the sweep below."""
    rng = np.random.default_rng(7)
    shapes = {"gemm": {"a": (3, 4), "b": (4, 5)}, "conv2d": {"x": (1, 2, 5, 5), "weight": (3, 2, 3, 3)},
              "softmax": {"x": (3, 4)}, "attention": {"q": (1, 2, 4, 8), "k": (1, 2, 4, 8), "v": (1, 2, 4, 8)}}[op]
    return Call(op, {n: values(rng, s).astype(np.float32) for n, s in shapes.items()}, {})


@pytest.mark.parametrize("op", OPS)
def test_every_odd_keyword_value(op: str) -> None:
    """Each value of the pools above, alone on a small valid call: those refused always are refused as bad
    input, the others give NumPy's answer or are refused (the rare values random examples may miss)."""
    for pname, (bad, odd) in POOLS[op].items():
        for value in bad + odd:
            call = _base(op)
            call.params[pname] = value
            call.bad[pname] = any(value is b for b in bad)
            call.changes.append(f"param:{pname}")
            check(call)


def _found() -> dict[str, Call]:
    """Calls these properties found wrong (some only at TRACEA_PROPERTY_SCALE=15 or 40), kept as fixed cases."""
    f32 = np.float32
    x = np.arange(1, 13, dtype=f32).reshape(1, 3, 4, 1)
    q = np.ones((1, 1, 2, 8), f32)
    k = np.ones((1, 1, 1, 8), f32)
    k[..., 0] = np.inf  # every score of a row is -inf (q has -1 there): NumPy's softmax of it is NaN
    q[0, 0, 0, 0] = -1.0
    return {
        # the NHWC direct conv left the last output pixel unwritten when pw > (S - 1) * dw (a 1-wide filter)
        "conv nhwc 1x1 padded": Call("conv2d", {"x": x, "weight": np.ones((1, 1, 1, 1), f32)},
                                     {"padding": 1, "layout": "nhwc"}),
        "conv nhwc 1x2 padding 2": Call("conv2d", {"x": x, "weight": np.ones((2, 1, 2, 1), f32)},
                                        {"padding": 2, "layout": "nhwc"}),
        # explain took it, the call's float64 fallback refused it with the IR's own words
        "conv empty height, padded": Call("conv2d", {"x": np.zeros((1, 1, 0, 4), f32),
                                                     "weight": np.ones((1, 1, 1, 1), f32)}, {"padding": 1},
                                          bad={"x": True}),
        # the CPU kernel wrote 0 (a row that keeps no key) where NumPy has NaN
        "attention scores all -inf": Call("attention", {"q": q, "k": k, "v": np.ones((1, 1, 1, 8), f32)}, {}),
        # the CPU gelu gave -inf for -inf (exp's clamp), NumPy's tanh form NaN
        "gelu of -inf": Call("gemm", {"a": np.full((2, 1), -np.inf, f32), "b": np.ones((1, 3), f32)},
                             {"epilogue": "gelu"}),
        # batches of mismatched sizes reached numpy.matmul (ValueError); 1-D operands returned a scalar
        "gemm batch mismatch": Call("gemm", {"a": np.ones((2, 3, 4), f32), "b": np.ones((3, 4, 5), f32)}, {},
                                    bad={"a": True}),
        "gemm vectors": Call("gemm", {"a": np.ones(4, f32), "b": np.ones(4, f32)}, {}, bad={"a": True}),
        # a block mask of another shape was read past its edge by the fallback (IndexError)
        "mask of another shape": Call("attention", {n: np.ones((1, 1, 4, 12), np.float64) for n in "qkv"},
                                      {"block_mask": np.ones((1, 1), bool), "block_size": 1}, bad={"mask": True}),
        # k and v with no heads: a ZeroDivisionError in the fallback
        "no kv heads": Call("attention", {"q": np.ones((1, 2, 3, 8), f32), "k": np.ones((1, 0, 3, 8), f32),
                                          "v": np.ones((1, 0, 3, 8), f32)}, {}, bad={"k": True}),
        # head_dim 0: 1/sqrt(0) before the empty result
        "head_dim 0": Call("attention", {n: np.ones((1, 1, 3, 0), f32) for n in "qkv"}, {}),
    }


@pytest.mark.parametrize("case", sorted(_found()))
def test_what_the_properties_found(case: str) -> None:
    call = _found()[case]
    if case.startswith("conv nhwc"):  # a larger call of the same kernel first: what it leaves in the kernel's
        big = np.full((2, 9, 9, call.arrays["x"].shape[3]), 5, np.float32)  # workspace is what it misses
        ops.conv2d(big, call.arrays["weight"], **call.params)
    assert check(call, must_run=not call.refused) in (("error",) if call.refused else ("tracea", "fallback", "empty"))


@pytest.mark.parametrize("op", OPS)
def test_valid_calls_match_numpy(op: str) -> None:
    """Every dtype the ops compute, every layout, ``out=``: the result is NumPy's (an ``out`` that is an input
    is refused: tests/test_ops_prepared.py)."""
    paths = PATHS.setdefault(f"valid {op}", [])

    @props(25)
    @given(data=st.data())
    def prop(data: Any) -> None:
        rng, dtype, call = _drawn_call(data, op, 3)
        if data.draw(st.booleans(), label="out"):
            call.params["out"] = np.full(reference(call).shape, np.nan, dtype)
        paths.append(check(call, must_run=True))

    prop()
    assert {"tracea", "fallback"} <= set(paths), paths


NAN_EXAMPLES = {"gemm": 12, "conv2d": 40, "softmax": 20, "attention": 15}  # conv and softmax compile little


@pytest.mark.parametrize("op", OPS)
def test_nan_and_infinity_propagate_through_the_kernels_as_through_numpy(op: str) -> None:
    """Dense float32 inputs holding NaN, +inf and -inf: the kernel runs, and its result has NaN and infinities
    exactly where NumPy's float64 computation has them (a softmax row with a NaN or +inf, or only -inf, is NaN;
    relu and gelu keep a NaN; a NaN key dropped by the mask is dropped)."""

    @props(NAN_EXAMPLES[op])
    @given(data=st.data())
    def prop(data: Any) -> None:
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        call = data.draw(BUILDERS[op](rng, "float32", True, False))
        assert check(call, must_run=True) == "tracea", ops.explain()

    prop()


# ------------------------------------------------------------------------------- the other public names

EXPLAIN_FNS: list[Any] = [*SCALARS, print, len, ops.explain, ops.clear_cache, ops.stats, ops.allow_fallback,
                          ops.Route, lambda *a, **k: 1, "GEMM", "gemm ", "conv", "Gemm", np.matmul,
                          np.ones((2, 2), np.float32)]


def test_explain_takes_only_the_ops() -> None:
    """explain's op argument: a name or function of the four ops (or a Tracea conv layer), else one
    BadInputError, and nothing else is ever called (no cache cleared, no policy changed); an op with
    arguments it does not take is a BadInputError too."""
    a = np.ones((3, 4), np.float32)

    @props(40)
    @given(fn=st.sampled_from(EXPLAIN_FNS + [None, *OPS, *FUNCS.values()]),
           args=st.lists(st.sampled_from([a, *SCALARS]), max_size=3),
           kwargs=st.dictionaries(st.sampled_from(["out", "bogus", "dim", "alpha"]), st.sampled_from(SCALARS),
                                  max_size=2))
    def prop(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
        ops.gemm(a, a.T)  # a call to remember, counted
        counts = ops.stats()
        try:
            route = ops.explain(fn, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - checked on the next line
            one_line(exc)
            assert isinstance(exc, BadInputError), exc
        else:
            assert isinstance(route, ops.Route) and str(route)
            assert fn is None or (isinstance(fn, str) and fn in OPS) or any(fn is f for f in FUNCS.values()), fn
        assert ops.stats() == counts  # nothing built, counted or cleared
        ops.gemm(a.astype(np.float64), a.T.astype(np.float64))  # fallbacks still allowed
        assert ops.explain().path == "fallback"

    prop()


def test_allow_fallback_takes_only_a_bool() -> None:
    x = np.ones((2, 3))  # float64: the fallback

    @props(20)
    @given(flag=st.sampled_from([*SCALARS, np.bool_(False), np.bool_(True), np.array(False)]))
    def prop(flag: Any) -> None:
        try:
            if isinstance(flag, (bool, np.bool_)):
                ops.allow_fallback(flag)
                if flag:
                    assert ops.softmax(x).shape == x.shape
                else:
                    with pytest.raises(UnsupportedError, match="float64"):
                        ops.softmax(x)
            else:
                with pytest.raises(BadInputError, match="allow_fallback: expected True or False"):
                    ops.allow_fallback(flag)
                assert ops.softmax(x).shape == x.shape  # the policy is as it was
        finally:
            ops.allow_fallback(True)

    prop()


def test_stats_and_clear_cache() -> None:
    """``stats()`` counts calls by path; ``clear_cache()`` forgets them (and the kernels, not the build cache)."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ops.clear_cache()
    assert ops.stats() == {}
    ops.softmax(x)
    ops.softmax(x)
    ops.softmax(x.astype(np.float64))
    got = ops.stats()
    assert set(got) <= {"builds", "kernel_hits", "tracea", "fallbacks", "slow_path", "fast_path"}
    assert got["fallbacks"] == 1 and got["tracea"] == 2 and got["kernel_hits"] >= 1
    assert got["slow_path"] == 2 and got["fast_path"] == 1  # the second float32 call was prepared by the first
    ops.clear_cache()
    assert ops.stats() == {}
    route = ops.Route(op="gemm", schedule={"odd": object()})  # a Route prints whatever its fields hold
    assert str(route).startswith("gemm: Tracea kernel")


def test_without_torch_the_pytorch_pieces_are_one_clear_error() -> None:
    """In a process where torch cannot be imported (blocked there as an uninstalled module is, whether or not
    this machine has it): the pieces are not offered, and naming one is one clear error with the pip command."""
    import subprocess
    import sys

    script = """
import sys
sys.modules["torch"] = None  # what an uninstalled torch looks like: find_spec None, import ModuleNotFoundError
import tracea.ops as ops
from tracea.doctor.errors import ToolchainMissingError
namespace = {}
exec("from tracea.ops import *", namespace)
assert {"gemm", "explain", "Route"} <= set(namespace), sorted(namespace)
for name in ops._TORCH_PIECES:
    assert name not in ops.__all__ and name not in namespace, name
    try:
        getattr(ops, name)
    except ToolchainMissingError as exc:
        assert "needs PyTorch" in str(exc) and "pip install" in (exc.hint or ""), exc
    else:
        raise AssertionError(f"{name} without torch did not raise")
try:
    ops.no_such_thing
except AttributeError:
    pass
else:
    raise AssertionError("an unknown name did not raise AttributeError")
print("ok", len(ops._TORCH_PIECES))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-2000:]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed here")
def test_the_pytorch_pieces_take_hostile_arguments() -> None:
    import torch

    assert set(ops._TORCH_PIECES) <= set(ops.__all__)
    for bad in ("model", 3, [torch.nn.Conv2d(1, 1, 1)], np.ones(2)):
        for fn in (ops.patch_conv2d, ops.unpatch_conv2d):
            with pytest.raises(BadInputError, match="torch.nn.Module"):
                fn(bad)
    with pytest.raises(UnsupportedError):
        ops.TraceaConv2d.from_conv(torch.nn.Linear(2, 2))
    for bad in ("model", 3, [torch.nn.Linear(1, 1)], np.ones(2)):
        for fn in (ops.patch_linear, ops.unpatch_linear):
            with pytest.raises(BadInputError, match="torch.nn.Module"):
                fn(bad)
    with pytest.raises(UnsupportedError):
        ops.TraceaLinear.from_linear(torch.nn.Conv2d(1, 1, 1))
    assert ops.last_report() is None or isinstance(ops.last_report(), dict)
    assert isinstance(ops.format_report(), str)
    for bad in ("report", 3, {"replaced": []}, [None]):
        with pytest.raises(BadInputError, match="format_report"):
            ops.format_report(bad)
    ops.register_compile_backend()
    torch.manual_seed(0)
    layer, plain = ops.TraceaConv2d(2, 3, 3, padding=1), torch.nn.Conv2d(2, 3, 3, padding=1)
    plain.load_state_dict(layer.state_dict())
    good = [torch.randn(1, 2, 5, 5), torch.randn(2, 5, 5), torch.randn(2, 2, 6, 5)[..., ::2, :],
            torch.randn(1, 2, 5, 5).to(memory_format=torch.channels_last), torch.randn(0, 2, 5, 5)]
    bad = [torch.randn(1, 3, 5, 5), torch.randn(5, 5), torch.randn(1, 1, 2, 5, 5), torch.randn(1, 2, 1, 1)[:, :, :0],
           np.ones((1, 2, 5, 5), np.float32), "x", None, HUGE]

    @props(20)
    @given(x=st.sampled_from(good + bad), explain=st.booleans())
    def prop(x: Any, explain: bool) -> None:
        with torch.no_grad():
            try:
                got = ops.explain(layer, x) if explain else layer(x)
            except Exception as exc:  # noqa: BLE001 - checked on the next line
                one_line(exc)
                assert any(x is b for b in bad), exc
                return
            assert any(x is g for g in good), x
            if not explain:
                assert torch.allclose(got, plain(x), rtol=1e-4, atol=1e-5)

    prop()


COVERED = {"gemm", "conv2d", "softmax", "attention", "explain", "allow_fallback", "clear_cache", "stats", "Route",
           "TraceaConv2d", "patch_conv2d", "unpatch_conv2d", "register_compile_backend", "last_report",
           "format_report", "TraceaLinear", "patch_linear", "unpatch_linear"}


def test_every_public_name_has_a_property() -> None:
    """The public names are read from tracea.ops itself (``__all__``, the PyTorch pieces it loads on first use,
    any public function or class its modules put in its namespace): a new one fails here until a property
    above covers it and its name is added to COVERED."""
    public = set(ops.__all__) | set(ops._TORCH_PIECES) | {
        n for n, v in vars(ops).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
        and getattr(v, "__module__", "").startswith("tracea.ops")}
    assert public == COVERED, f"uncovered: {sorted(public - COVERED)}; gone: {sorted(COVERED - public)}"
