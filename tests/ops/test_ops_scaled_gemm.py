"""``tracea.ops.scaled_gemm`` on the caller's arrays: the CPU kernel against the float64 function for every scale
mode (told by the scales' shapes), both layouts of ``b``, every output type; ``out=``; the vendor path and its
policy; and every bad argument one ``BadInputError`` naming it. torch tensors (int8, float8) where torch is
installed (CI's torch environment runs this file too)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import tracea
from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.kernels import relative_error

pytestmark = pytest.mark.usefixtures("kernel_cache")
ops = tracea.ops
RNG = np.random.default_rng(7)


def _operands(m: int, n: int, k: int):
    a = RNG.integers(-128, 128, (m, k), dtype=np.int8)
    w = RNG.integers(-128, 128, (n, k), dtype=np.int8)
    return a, w


def _exact(a, w, sa=None, sb=None):
    y = a.astype(np.float64) @ w.T.astype(np.float64)
    if sa is None:
        return y
    sa, sb = np.asarray(sa, np.float64), np.asarray(sb, np.float64)
    return y * sa.reshape(-1, 1) * sb.reshape(1, -1) if sa.size * sb.size > 1 else y * sa.item() * sb.item()


@pytest.mark.parametrize("m", [1, 16, 40])
@pytest.mark.parametrize("row_major_b", [False, True])
def test_row_scales_either_layout(m, row_major_b):
    a, w = _operands(m, 300, 520)
    sa = RNG.uniform(1e-3, 1e-2, m).astype(np.float32)
    sb = RNG.uniform(1e-3, 1e-2, 300).astype(np.float32)
    b = np.ascontiguousarray(w.T) if row_major_b else w.T
    y = ops.scaled_gemm(a, b, sa, sb)
    assert y.dtype == np.float32 and relative_error(y, _exact(a, w, sa, sb)) <= 1e-6
    route = ops.explain(ops.scaled_gemm, a, b, sa, sb)
    assert route.path == "tracea" and route.variant.endswith(".scaled_gemm")
    y2 = ops.scaled_gemm(a, b, sa[:, None], sb[None, :])  # torch._scaled_mm's rowwise shapes
    assert np.array_equal(y, y2)


def test_tensor_scales_fp16_and_the_raw_accumulator():
    a, w = _operands(7, 33, 130)
    y = ops.scaled_gemm(a, w.T, np.float32(0.01), np.array([0.02], np.float32), out_dtype="fp16")
    assert y.dtype == np.float16 and relative_error(y, _exact(a, w, [0.01], [0.02])) <= 8 * 2.0**-11
    acc = ops.scaled_gemm(a, w.T)
    assert acc.dtype == np.int32 and np.array_equal(acc, a.astype(np.int64) @ w.T.astype(np.int64))


def test_block_scales():
    a, w = _operands(5, 260, 384)
    sa = RNG.uniform(0.5, 1.5, (5, 3)).astype(np.float32)
    sb = RNG.uniform(0.5, 1.5, (3, 3)).astype(np.float32)
    y = ops.scaled_gemm(a, w.T, sa, sb)
    exact = sum((a[:, q * 128:(q + 1) * 128].astype(np.float64) @ w[:, q * 128:(q + 1) * 128].T.astype(np.float64))
                * sa[:, q, None] * np.repeat(sb[q], 128)[None, :260] for q in range(3))
    assert relative_error(y, exact) <= 1e-5


def test_out_is_written_and_checked():
    a, w = _operands(4, 64, 64)
    out = np.empty((4, 64), np.int32)
    assert ops.scaled_gemm(a, w.T, out=out) is out and np.array_equal(out, _exact(a, w))
    for bad in (np.empty((4, 64), np.float32), np.empty((4, 63), np.int32), np.empty((64, 4), np.int32).T):
        with pytest.raises(BadInputError, match="out"):
            ops.scaled_gemm(a, w.T, out=bad)


@pytest.mark.parametrize(("args", "word"), [
    (lambda a, w: (a.astype(np.float32), w.T), "not an 8-bit type"),
    (lambda a, w: (a, w.T.astype(np.int16)), "not an 8-bit type"),
    (lambda a, w: (a[:, :-1], w.T), r"expected \(m, k\) and \(k, n\)"),
    (lambda a, w: (a, w.T, np.ones(8, np.float32), None), "give both"),
    (lambda a, w: (a, w.T, np.ones(7, np.float32), np.ones(16, np.float32)), "no scale mode"),
    (lambda a, w: (a, w.T, np.ones(8, np.float64), np.ones(16, np.float32)), "float32"),
    (lambda a, w: (a, w.T, np.ones(8, np.float32), np.full(16, np.nan, np.float32)), "non-finite"),
    (lambda a, w: (a, w.T[::2]), r"expected \(m, k\)"),
    (lambda a, w: (a, [[1]]), "expected a NumPy array"),
])
def test_bad_arguments_are_one_line(args, word):
    a, w = _operands(8, 16, 32)
    with pytest.raises(BadInputError, match=word):
        ops.scaled_gemm(*args(a, w))
    with pytest.raises(BadInputError, match="out_dtype"):
        ops.scaled_gemm(a, w.T, out_dtype="fp8e4m3")
    with pytest.raises(BadInputError, match="int32 accumulator"):
        ops.scaled_gemm(a, w.T, out_dtype="fp32")  # no scales: int32 only


def _needs_torch():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here")
    import torch

    return torch


def test_torch_int8_and_fp8():
    torch = _needs_torch()
    a, w = _operands(16, 96, 256)
    sa, sb = torch.rand(16) + 0.5, torch.rand(96) + 0.5
    ops.clear_cache()
    for _ in range(2):  # the second call: the prepared launch
        y = ops.scaled_gemm(torch.from_numpy(a), torch.from_numpy(w).t(), sa, sb, out_dtype=torch.bfloat16)
        assert y.dtype == torch.bfloat16 and relative_error(y.float().numpy(), _exact(a, w, sa, sb)) <= 8 * 2.0**-8
    assert ops.stats().get("fast_path", 0) == 1
    f8 = torch.randn(8, 128).to(torch.float8_e4m3fn)
    g8 = torch.randn(32, 128).to(torch.float8_e4m3fn)
    one = torch.ones(1)
    y8 = ops.scaled_gemm(f8, g8.t(), one * 0.5, one * 2.0)
    assert torch.equal(y8, (f8.double() @ g8.double().t()).float())  # exact products, one rounding
    assert ops.explain(ops.scaled_gemm, f8, g8.t(), one, one).path == "fallback"
    ops.allow_fallback(False)
    try:
        with pytest.raises(UnsupportedError, match="fp8e4m3"):
            ops.scaled_gemm(f8, g8.t(), one, one)
    finally:
        ops.allow_fallback(True)


def test_hostile_arguments_give_the_function_or_one_line():
    """40 calls drawn from good and hostile operands, scales and output types: each is the float64 function (within
    the op's tolerance) or one documented error of one line."""
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import given
    from hypothesis import strategies as st
    from ops_calls import HUGE, SCALARS, props
    from ops_check import one_line

    a, w = _operands(6, 40, 256)
    operands = [a, w.T, np.ascontiguousarray(w.T), a.astype(np.float32), a[:, :100], a[None], a.T, np.empty((0, 256),
                np.int8), w]
    scales = [None, np.float32(0.5), np.ones(1, np.float32), np.ones(6, np.float32), np.ones(40, np.float32),
              np.ones((6, 2), np.float32), np.ones((2, 1), np.float32), np.full(6, np.inf, np.float32),
              np.ones(6, np.float64), *SCALARS[:8], HUGE]
    outs = [None, "fp32", "bf16", "fp16", "int32", "int8", "fp8e4m3", 3, HUGE]
    assert hypothesis is not None

    rows = RNG.uniform(0.5, 2, 6).astype(np.float32)
    cols = RNG.uniform(0.5, 2, 40).astype(np.float32)
    valid = [(a, w.T, None, None, None), (a, w.T, rows, cols, "bf16"), (a, operands[2], rows[:, None], cols[None], None),
             (a, w.T, np.float32(0.25), np.ones(1, np.float32), "fp16"), (a, operands[2], None, None, "int32"),
             (a, w.T, rows.repeat(2).reshape(6, 2), np.ones((2, 1), np.float32), "fp32")]
    hostile = st.tuples(st.sampled_from(operands[:4]), st.sampled_from(operands), st.sampled_from(scales),
                        st.sampled_from(scales), st.sampled_from(outs))

    @props(40)
    @given(call=st.one_of(st.sampled_from(valid), hostile))
    def prop(call) -> None:
        x, y, sa, sb, out_dtype = call
        try:
            got = ops.scaled_gemm(x, y, sa, sb, out_dtype=out_dtype)
        except Exception as exc:  # noqa: BLE001 - checked on the next line
            one_line(exc)
            return
        from tracea.kernels import ScaledGemm
        from tracea.kernels.dtypes import to_float64

        ya = np.asarray(y)
        layout = "col" if ya.T.flags.c_contiguous else "row"
        m, k, n = x.shape[0], x.shape[1], ya.shape[1]
        scale_a = None if sa is None else np.asarray(sa, np.float32)
        scale_b = None if sb is None else np.asarray(sb, np.float32)
        mode = "none" if scale_a is None else ("tensor" if scale_a.size == scale_b.size == 1 else
                                               "row" if scale_a.ndim <= 2 and scale_a.size == m else "block128")
        op = ScaledGemm(m, n, k, scale=mode, out_dtype=out_dtype or ("int32" if mode == "none" else "fp32"),
                        layout_b=layout)
        inputs = {"a": x, "b": ya.T if layout == "col" else ya}
        if mode != "none":
            inputs |= {"scale_a": scale_a.reshape(op.scale_shapes()["scale_a"]),
                       "scale_b": scale_b.reshape(op.scale_shapes()["scale_b"])}
        out = to_float64(got.view(np.uint16) if str(got.dtype) == "bfloat16" else got, op.output_dtype)
        ref = op.reference(inputs)
        top = op.output_dtype.max_finite
        over = np.abs(ref) > top * (1 + 2 * op.output_dtype.unit_roundoff)  # past the range: an infinity of its sign
        edge = (np.abs(ref) > top) & ~over  # the last half ulp rounds to the largest finite value or beyond
        assert np.array_equal(out[over], np.copysign(np.inf, ref[over]))
        keep = ~(over | edge)
        assert relative_error(np.where(keep, out, 0), np.where(keep, ref, 0)) <= op.tolerance_bound()

    prop()


def test_one_scale_beside_per_column_ones_and_small_scales():
    """W8A8's usual pair (one scale for the activations, one a column for the weights) is the row mode with the
    single scale repeated; scales whose product underflows fp32 still give a result fp32 holds."""
    a, w = _operands(5, 70, 300)
    sb = RNG.uniform(0.5, 2, 70).astype(np.float32)
    y = ops.scaled_gemm(a, w.T, np.float32(0.03), sb, out_dtype=np.float32)
    assert relative_error(y, _exact(a, w, np.full(5, 0.03, np.float32), sb)) <= 1e-6
    y2 = ops.scaled_gemm(a, w.T, np.full(5, 0.03, np.float32), np.ones(1, np.float32))
    assert relative_error(y2, _exact(a, w, [0.03], [1.0])) <= 1e-6
    tiny = np.full(1, 1e-20, np.float32)  # 1e-40 as a product: subnormal in fp32; times a sum of ~1e5, normal
    for m in (3, 40):  # the dot form and the packed one
        a, w = _operands(m, 64, 512)
        y = ops.scaled_gemm(a, w.T, tiny, tiny)
        exact = _exact(a, w, tiny, tiny)
        assert np.abs(exact).max() > 1e-37 and relative_error(y, exact) <= 1e-6


def test_read_only_out_is_refused():
    a, w = _operands(4, 16, 64)
    out = np.empty((4, 16), np.int32)
    out.flags.writeable = False
    with pytest.raises(BadInputError, match="read-only"):
        ops.scaled_gemm(a, w.T, out=out)


def test_a_repeated_call_takes_the_prepared_path_and_still_checks_values():
    ops.clear_cache()
    a, w = _operands(4, 48, 256)
    sa, sb = RNG.uniform(0.5, 2, 4).astype(np.float32), RNG.uniform(0.5, 2, 48).astype(np.float32)
    first = ops.scaled_gemm(a, w.T, sa, sb)
    a2, sa2 = RNG.integers(-128, 128, a.shape, dtype=np.int8), (sa * 3).astype(np.float32)
    again = ops.scaled_gemm(a2, w.T, sa2, sb)  # same signature, new values: the prepared launch
    assert ops.stats().get("fast_path", 0) == 1
    assert relative_error(first, _exact(a, w, sa, sb)) <= 1e-6
    assert relative_error(again, _exact(a2, w, sa2, sb)) <= 1e-6 and again is not first
    bad = sb.copy()
    bad[5] = np.nan  # a non-finite scale on the prepared path: the checked one says so
    with pytest.raises(BadInputError, match="non-finite"):
        ops.scaled_gemm(a, w.T, sa, bad)
    ops.clear_cache()
    ops.scaled_gemm(a, w.T, sa, sb)
    assert ops.stats().get("fast_path", 0) == 0


def test_repeated_calls_on_strided_views_read_them_as_the_first_call_does():
    """A strided A (a slice of a wider buffer) and a strided scale: the prepared launch of a repeated call copies them
    as the checked first call does, instead of reading their memory as dense (every call matches the reference)."""
    rng = np.random.default_rng(11)
    m, n, k = 48, 64, 128
    a = rng.integers(-20, 20, (m, k + 32), dtype=np.int8)[:, :k]
    w = rng.integers(-20, 20, (n, k), dtype=np.int8)
    sa = (rng.random(2 * m) + 0.5).astype(np.float32)[::2]
    sb = (rng.random(n) + 0.5).astype(np.float32)
    want = (a.astype(np.float64) @ w.T.astype(np.float64)) * sa[:, None] * sb[None, :]
    before = ops.stats().get("fast_path", 0)
    for _ in range(3):
        y = ops.scaled_gemm(a, w.T, sa, sb)
        assert float(np.abs(y - want).max() / np.abs(want).max()) < 1e-6
    assert ops.stats().get("fast_path", 0) == before + 2  # the two repeated calls took the prepared launch


def test_the_fused_epilogue_on_the_host_and_its_prepared_calls():
    """``bias``/``residual``/``epilogue``/``alpha`` as tracea.ops.gemm takes them, after the scales: the checked call,
    then repeated calls on new bias values through the prepared launch (it reads each call's pointers), torch's bf16
    bias, and one line for each wrong operand."""
    ops.clear_cache()
    a, w = _operands(16, 48, 256)
    sa, sb = RNG.uniform(1e-3, 3e-3, 16).astype(np.float32), RNG.uniform(1e-3, 3e-3, 48).astype(np.float32)
    res = RNG.standard_normal((16, 48)).astype(np.float32)
    for i in range(3):
        bias = RNG.standard_normal(48).astype(np.float32) + i
        y = ops.scaled_gemm(a, w.T, sa, sb, bias=bias, residual=res, epilogue="bias,relu,scale,residual", alpha=0.5)
        want = np.maximum(_exact(a, w, sa, sb) + bias, 0) * 0.5 + res
        assert relative_error(y, want) <= 1e-6
    assert ops.stats().get("fast_path", 0) == 2
    assert relative_error(ops.scaled_gemm(a, w.T, sa, sb, bias=bias), _exact(a, w, sa, sb) + bias) <= 1e-6  # default
    for bad, word in ((dict(bias=bias[:5]), "dense"), (dict(bias=bias.astype(np.float64)), "C's type"),
                      (dict(bias=bias, epilogue="relu"), "not named"), (dict(residual=res[:, ::2]), "dense"),
                      (dict(epilogue="relu", alpha=2.0), "scale is not named")):
        with pytest.raises(BadInputError, match=word):
            ops.scaled_gemm(a, w.T, sa, sb, **bad)
    torch = pytest.importorskip("torch")
    tb = torch.from_numpy(bias).to(torch.bfloat16)
    y = ops.scaled_gemm(torch.from_numpy(a), torch.from_numpy(w).t(), torch.from_numpy(sa), torch.from_numpy(sb),
                        out_dtype=torch.bfloat16, bias=tb)
    assert y.dtype == torch.bfloat16
    assert relative_error(y.double().numpy(), _exact(a, w, sa, sb) + tb.double().numpy()) <= 2**-7
    for other in (torch.from_numpy(bias), [1.0] * 48, 2.0):
        with pytest.raises(BadInputError, match="like a"):
            ops.scaled_gemm(a, w.T, sa, sb, bias=other)
        with pytest.raises(BadInputError, match="like a"):  # (torch operands: a list or a number, one line too)
            ops.scaled_gemm(torch.from_numpy(a), torch.from_numpy(w).t(), torch.from_numpy(sa), torch.from_numpy(sb),
                            bias=bias if isinstance(other, torch.Tensor) else other)


def test_an_fp8_output_with_scale_out_and_amax_on_torch_tensors():
    """out_dtype float8 (the fallback on a CPU: no FP8 kernel runs there): C = saturate(v * scale_out) as torch
    quantizes it, amax written (not raised) with the largest |v|; what only an FP8 C takes, refused beside others."""
    torch = _needs_torch()
    g = torch.Generator().manual_seed(5)
    a = (torch.randn(8, 128, generator=g) * 8).to(torch.float8_e4m3fn)
    w = (torch.randn(32, 128, generator=g) * 8).to(torch.float8_e4m3fn)
    sa, sb = torch.full((8, 1), 0.01), torch.full((1, 32), 0.02)
    v = (a.double() @ w.double().t()) * 0.01 * 0.02
    for so, kind in ((40.0, torch.float8_e4m3fn), (4000.0, torch.float8_e4m3fn), (1.0, torch.float8_e5m2)):
        amax = torch.full((1,), -3.0)
        y = ops.scaled_gemm(a, w.t(), sa, sb, out_dtype=kind, scale_out=torch.tensor([so]), amax=amax)
        top = 448.0 if kind == torch.float8_e4m3fn else 57344.0
        assert y.dtype == kind and torch.equal(y.float(), (v * so).clamp(-top, top).float().to(kind).float())
        assert float(amax) == pytest.approx(float(v.abs().max()), rel=1e-6)
    bias = torch.randn(32).to(torch.bfloat16)
    y = ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=2.0, bias=bias)  # bf16 operands
    assert torch.equal(y.float(), ((v + bias.double()) * 2).clamp(-448, 448).float().to(torch.float8_e4m3fn).float())
    with pytest.raises(BadInputError, match="scale_out: an FP8 C"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(BadInputError, match="apply to an FP8 out_dtype"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype=torch.bfloat16, amax=torch.zeros(1))
    with pytest.raises(BadInputError, match="amax: expected a float32"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=1.0, amax=torch.zeros(1, dtype=torch.float64))
    with pytest.raises(BadInputError, match="non-finite"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=float("nan"))
    with pytest.raises(BadInputError, match="scale_out: 2 values"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=torch.ones(2))
    with pytest.raises(BadInputError, match="scale_out: holds a non-finite"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=torch.tensor([float("inf")]))
    so = torch.ones(1)
    with pytest.raises(BadInputError, match="amax: is written by the call"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=so, amax=so)
    with pytest.raises(BadInputError, match="amax: is written by the call"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=1.0, amax=torch.zeros(1, requires_grad=True))
    with pytest.raises(BadInputError, match="expected bf16"):
        ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="fp8e4m3", scale_out=1.0, bias=bias.float())
