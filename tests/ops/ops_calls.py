"""Calls of ``tracea.ops`` as values, drawn by Hypothesis for the properties (tests/ops/test_ops_properties_*.py).

A call is drawn as a valid tiny one, then changed 0 to 2 times: an array of another dtype (float16/32/64,
longdouble, int8/32/64, uint8, bool, complex64/128, object, str, bytes, datetime64, structured), shape (0-d to
6-d, empty dimensions, mismatched sizes) or layout (Fortran order, strided, reversed, zero-stride broadcast,
read-only, unaligned); a non-array where an array goes (None, str, lists, nested lists, bools, 2**70, an
integer of 5000 digits, NaN, inf); a keyword set to an odd value (stride=0, padding=-1, epilogue strings with
odd characters, alpha="2", scale=nan, causal="yes", block masks of the wrong shape or dtype); an ``out=`` that
is right, of the wrong shape or dtype, read-only, Fortran-ordered, broadcast, or an input itself. A change
that no call may take (a non-float dtype, a non-array, a value of a keyword's "refused always" list, a wrong
out) marks the call as one that must be a BadInputError, so a value silently read as something else
(causal="yes" as True) fails too. Sizes are tiny and drawn from few values, so the CPU kernels (gcc, once per
signature) and the NumPy fallback both run.

Examples are fixed (derandomized, no database); ``TRACEA_PROPERTY_SCALE=10`` runs ten times as many, freshly
random.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from ops_check import FUNCS, reference

SCALE = int(os.environ.get("TRACEA_PROPERTY_SCALE", "1"))


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


OPS = sorted(FUNCS)


def drawn_call(data: Any, op: str, float32_weight: int) -> tuple[Any, str, Any]:
    """(rng, dtype, call): a seeded generator and a valid call of ``op`` in ``dtype``, float32 drawn ``float32_weight`` times as
    often as each other float dtype, with or without special values."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    dtype = data.draw(st.sampled_from(["float32"] * float32_weight + FLOAT_DTYPES[1:]), label="dtype")
    return rng, dtype, data.draw(BUILDERS[op](rng, dtype, data.draw(st.booleans(), label="specials"), True))
