"""Properties of the four ops of ``tracea.ops`` on valid calls: every dtype the ops compute, every layout and
``out=`` give NumPy's float64 answer within the dtype's tolerance (25 calls each), and NaN and infinities go
through the kernels exactly where NumPy has them (12 gemm, 40 conv2d, 20 softmax and 15 attention calls). What
is checked of each call: ops_check.py; how calls are drawn: ops_calls.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from ops_calls import BUILDERS, OPS, props  # noqa: E402
from ops_calls import drawn_call as _drawn_call  # noqa: E402 - its name seeds the examples
from ops_check import check, reference  # noqa: E402

from tracea import ops  # noqa: E402

PATHS: dict[str, list[str]] = {}  # what each property's calls ran: "tracea", "fallback", "empty", "error"


@pytest.mark.parametrize("op", OPS)
def test_valid_calls_match_numpy(op: str) -> None:
    """Every dtype the ops compute, every layout, ``out=``: the result is NumPy's (an ``out`` that is an input
    is refused: tests/ops/test_ops_prepared.py)."""
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
