"""Properties of the four ops of ``tracea.ops`` (issue 30) under hostile arguments: whatever a call is given
(ops_calls.py draws a valid tiny call and changes it 0 to 2 times), it returns a right answer or raises one of
the errors docs/ops.md documents, ``BadInputError`` for what the caller got wrong, ``UnsupportedError`` for
what cannot run here, in one line, and a change no call may take is a ``BadInputError`` (ops_check.py says all
that is checked of each call). 80 hostile calls for each of gemm, conv2d, softmax and attention, some clearing
the caches first, some under ``allow_fallback(False)``; each keyword's odd values are also swept once each on
a small valid call, so a rare value is never left to chance, and what the properties found (some only at
TRACEA_PROPERTY_SCALE 15 or 40) stays as fixed cases.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from ops_calls import OPS, POOLS, Call, changed, props, values  # noqa: E402
from ops_calls import drawn_call as _drawn_call  # noqa: E402 - its name seeds the examples
from ops_check import check  # noqa: E402

from tracea import ops  # noqa: E402

PATHS: dict[str, list[str]] = {}  # what each property's calls ran: "tracea", "fallback", "empty", "error"


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
