"""What every property of ``tracea.ops`` checks of a call (tests/ops/test_ops_properties_*.py): asked of
``explain`` first (the same refusal, the same path, nothing built, no counter moved), then made, maybe after
clearing the caches or under ``allow_fallback(False)``. It returns a result of its inputs' kind and dtype, or
raises one of the errors docs/ops.md documents, in one line; never another exception, never a kernel build
that fails (the engine's "building ... failed" warning), never a wrong answer: a result is checked against a
float64 NumPy reference written here, with NaN and infinities exactly where NumPy has them, its inputs are
left as they were, and ``stats()`` counts what ran.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tracea import ops
from tracea.doctor.errors import BadInputError, UnsupportedError

if TYPE_CHECKING:
    from ops_calls import Call

DOCUMENTED = (BadInputError, UnsupportedError)
FUNCS: dict[str, Callable[..., Any]] = {"gemm": ops.gemm, "conv2d": ops.conv2d, "softmax": ops.softmax,
                                        "attention": ops.attention}


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
