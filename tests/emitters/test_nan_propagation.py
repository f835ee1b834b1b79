"""NaN and infinity propagate through the CPU kernels as they do through NumPy and torch (issue 30): a softmax
row holding a NaN or +inf, or only -inf, is NaN (at every row length: the vector body, the scalar tail and
the row of one vector); relu and gelu keep a NaN; a NaN in attention's Q or K makes exactly the outputs that see it
NaN (a key masked for a row is dropped for that row, as torch's masked fill drops it). Before, a softmax row of 16 or more columns with a NaN returned a finite distribution and relu turned
NaN into 0: a silently wrong answer. Each case is checked against the float64 reference: where it is NaN
the kernel's output is NaN, and everywhere else it is finite and within the op's tolerance.

The kernels are compiled and run on every family this machine can run (the ISA's max and min return their
second operand for a NaN on x86, propagate it on NEON, and the portable C is a comparison), and through
``tracea.ops`` as a user calls them.
"""

from __future__ import annotations

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.kernels import Conv2d, Gemm, Softmax, relative_error, tolerance
from tracea.kernels.dtypes import to_float64, to_storage
from tracea.kernels.ops.attention import Attention

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")
pytestmark = pytest.mark.usefixtures("kernel_cache")


def variant(family: str, kind: str, dtype: str = "fp32"):
    v = cpu.resolve(f"{family}.{kind}")
    if v.unmet(HOST, dtype):
        pytest.skip(f"{v.id} cannot run here: {'; '.join(v.unmet(HOST, dtype))}")
    return v


def assert_like_reference(got, ref, op, what: str) -> None:
    """NaN exactly where the reference is NaN; elsewhere finite and within tolerance."""
    got = np.asarray(got, dtype=np.float64)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), (what, np.argwhere(np.isnan(got) != nan)[:5])
    if (~nan).any():
        ok = got[~nan]
        assert np.all(np.isfinite(ok) | ~np.isfinite(ref[~nan])), what
        assert relative_error(np.nan_to_num(ok), np.nan_to_num(ref[~nan])) <= tolerance(op), what


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_softmax_rows_with_nan_inf_or_only_minus_inf_are_nan(family, dtype):
    v = variant(family, "softmax", dtype)
    rng = np.random.default_rng()
    for cols in (1, 3, 8, 15, 16, 17, 33, 100, 1000):
        op = Softmax(8, cols, dtype=dtype)
        x = rng.standard_normal((8, cols)).astype(np.float32) * 3
        x[0, cols // 2] = np.nan  # in the vector body or the tail, as the length puts it
        x[1, -1] = np.nan  # the last element: the tail, where there is one
        x[2, 0] = np.inf
        x[3, :] = -np.inf  # a row that keeps nothing: exp(-inf - -inf) is NaN in NumPy and torch
        if cols > 1:
            x[4, ::2] = -np.inf  # masked entries: finite, those entries 0
        x[5, 0] = -np.inf
        inputs = {"x": to_storage(x, op.dtype)}
        kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
        with np.errstate(invalid="ignore", over="ignore"):
            ref = op.reference(inputs)
        got = to_float64(kernel(inputs), op.dtype)
        assert_like_reference(got, ref, op, f"{v.id} {op.signature}")
        assert np.isnan(got[:4]).all() and np.isfinite(got[6:]).all(), op.signature  # row 5 is NaN at 1 column


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("epilogue", ["relu", "gelu", "bias,relu", "scale,gelu"])
def test_gemm_epilogues_keep_a_nan(family, epilogue):
    v = variant(family, "gemm")
    rng = np.random.default_rng()
    for m, n, k in ((5, 7, 9), (33, 65, 40), (64, 128, 64)):
        op = Gemm(m, n, k, epilogue=epilogue, alpha=0.5)
        inputs = op.random_inputs(rng)
        inputs["a"][1, 0] = np.nan  # row 1 of C is NaN before the epilogue: relu(NaN) must stay NaN
        inputs["b"][0, n - 1] = np.nan  # and column n - 1
        kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
        with np.errstate(invalid="ignore"):
            ref = op.reference(inputs)
        got = kernel(inputs)
        assert_like_reference(got, ref, op, f"{v.id} {op.signature}")
        assert np.isnan(got[1]).all() and np.isnan(got[:, n - 1]).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_nan_in_a_conv_input_reaches_exactly_the_outputs_that_read_it(family):
    v = variant(family, "conv2d")
    rng = np.random.default_rng()
    op = Conv2d(1, 8, 9, 9, 16, 3, 3, padding=1, layout="nhwc", bias=True)
    inputs = op.random_inputs(rng)
    inputs["x"][0, 4, 4, 0] = np.nan  # in the 3x3 window of 9 output pixels, for every output channel
    kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
    with np.errstate(invalid="ignore"):
        ref = op.reference(inputs)
    got = kernel(inputs)
    assert_like_reference(got, ref, op, v.id)
    assert np.isnan(got).sum() == 9 * 16


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("causal", [False, True], ids=["dense", "causal"])
def test_attention_outputs_that_see_a_nan_are_nan(family, causal):
    """A NaN in a query row makes that row's output NaN; a NaN in a key makes the output of every row that
    keeps that key NaN, and (causal) rows before it, which never see it, stay right."""
    v = variant(family, "attention")
    rng = np.random.default_rng()
    for sq, d in ((7, 64), (100, 64), (130, 128)):
        op = Attention(1, 2, sq, d, causal=causal)
        inputs = op.random_inputs(rng)
        inputs["q"][0, 0, 3, 5] = np.nan
        inputs["k"][0, 1, sq - 2, 0] = np.nan
        kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
        with np.errstate(invalid="ignore"):
            ref = op.reference(inputs)
        got = to_float64(kernel(inputs), op.dtype)
        assert np.isnan(got[0, 0, 3]).all()
        seen = got[0, 1, sq - 2:] if causal else got[0, 1]
        assert np.isnan(seen).all()
        assert_like_reference(got, ref, op, f"{v.id} {op.signature}")


def test_the_ops_api_keeps_nan_through_the_kernels():
    from tracea import ops

    rng = np.random.default_rng()
    x = rng.standard_normal((4, 40)).astype(np.float32)
    x[1, 20] = np.nan
    x[2, 3] = np.inf
    y = ops.softmax(x)
    assert np.isnan(y[1]).all() and np.isnan(y[2]).all() and np.isfinite(y[[0, 3]]).all()
    a = rng.standard_normal((16, 32)).astype(np.float32)
    a[3, 3] = np.nan
    c = ops.gemm(a, rng.standard_normal((32, 24)).astype(np.float32), epilogue="relu")
    assert np.isnan(c[3]).all() and np.isfinite(np.delete(c, 3, axis=0)).all()
