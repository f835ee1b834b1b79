"""The core IR: validation names the field, counts are right, references are right (checked against
direct definitions), inputs are fresh and never zero."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracea.doctor.errors import BadInputError
from tracea.kernels import Conv2d, DType, Gemm, Op, Softmax, parse_dtype, relative_error, tolerance
from tracea.kernels.dtypes import bf16_from_float, bf16_to_float32, to_float64


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Gemm(0, 4, 4), "m"),
        (lambda: Gemm(4, -1, 4), "n"),
        (lambda: Gemm(4, 4, 2**31), "k"),
        (lambda: Gemm(4, 4, 4.5), "k"),
        (lambda: Gemm(True, 4, 4), "m"),
        (lambda: Gemm(4, 4, 4, dtype="fp64"), "dtype"),
        (lambda: Gemm(4, 4, 4, layout_a="diag"), "layout_a"),
        (lambda: Gemm(4, 4, 4, epilogue="bias,softplus"), "epilogue"),
        (lambda: Gemm(4, 4, 4, epilogue="relu,relu"), "epilogue"),
        (lambda: Gemm(2**21, 2**21, 4), "C (m x n)"),
        (lambda: Gemm(4, 4, 4, alpha=float("nan")), "alpha"),
        (lambda: Conv2d(1, 6, 8, 8, 4, 3, 3, groups=4), "groups"),
        (lambda: Conv2d(1, 8, 8, 8, 6, 3, 3, groups=4), "groups"),
        (lambda: Conv2d(1, 3, 4, 4, 8, 7, 3), "r"),
        (lambda: Conv2d(1, 3, 4, 4, 8, 3, 3, stride=0), "stride"),
        (lambda: Conv2d(1, 3, 4, 4, 8, 3, 3, padding=-1), "padding"),
        (lambda: Conv2d(1, 3, 4, 4, 8, 3, 3, layout="chwn"), "layout"),
        (lambda: Softmax(0, 5), "rows"),
        (lambda: Softmax(5, 2**40), "cols"),
    ],
)
def test_bad_sizes_name_the_field(build, field):
    with pytest.raises(BadInputError) as info:
        build()
    assert info.value.message.startswith(field)


def test_counts():
    g = Gemm(128, 64, 32, epilogue="bias,relu")
    assert g.flops == 2 * 128 * 64 * 32 + 2 * 128 * 64
    assert g.bytes == (128 * 32 + 32 * 64 + 128 * 64 + 64) * 4
    assert Gemm(8, 8, 8, dtype="bf16").bytes == 3 * 64 * 2
    c = Conv2d(2, 64, 56, 56, 128, 3, 3, padding=1)
    assert (c.p, c.q, c.gemm_m, c.gemm_n, c.gemm_k) == (56, 56, 2 * 56 * 56, 128, 64 * 9)
    assert c.flops == 2 * c.gemm_m * c.gemm_n * c.gemm_k
    s = Conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3)
    assert (s.p, s.q) == (112, 112)
    d = Conv2d(1, 4, 10, 10, 4, 3, 3, dilation=2)
    assert (d.p, d.q) == (6, 6)


@given(h=st.integers(1, 40), r=st.integers(1, 7), pad=st.integers(0, 3), stride=st.integers(1, 4), dil=st.integers(1, 3))
@settings(max_examples=200, deadline=None)
def test_conv_output_size_matches_the_sliding_window_count(h, r, pad, stride, dil):
    span = dil * (r - 1) + 1
    if h + 2 * pad < span:
        with pytest.raises(BadInputError):
            Conv2d(1, 1, h, h, 1, r, r, stride=stride, padding=pad, dilation=dil)
        return
    op = Conv2d(1, 1, h, h, 1, r, r, stride=stride, padding=pad, dilation=dil)
    assert op.p == len(range(0, h + 2 * pad - span + 1, stride))


def _naive_conv(op: Conv2d, inputs) -> np.ndarray:
    """The definition, loop by loop (NCHW)."""
    x = to_float64(inputs["x"], op.dtype)
    w = to_float64(inputs["weight"], op.dtype)
    if op.layout == "nhwc":
        x, w = x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)
    cg, kg = op.c // op.groups, op.k // op.groups
    out = np.zeros((op.n, op.k, op.p, op.q))
    for n, k, p, q in itertools.product(range(op.n), range(op.k), range(op.p), range(op.q)):
        g = k // kg
        acc = 0.0
        for c, r, s in itertools.product(range(cg), range(op.r), range(op.s)):
            y = p * op.stride[0] - op.padding[0] + r * op.dilation[0]
            xx = q * op.stride[1] - op.padding[1] + s * op.dilation[1]
            if 0 <= y < op.h and 0 <= xx < op.w:
                acc += x[n, g * cg + c, y, xx] * w[k, c, r, s]
        out[n, k, p, q] = acc + (to_float64(inputs["bias"], op.dtype)[k] if op.bias else 0.0)
    return out if op.layout == "nchw" else out.transpose(0, 2, 3, 1)


@pytest.mark.parametrize(
    "op",
    [
        Conv2d(2, 4, 7, 6, 6, 3, 3, padding=1, bias=True),
        Conv2d(1, 6, 9, 11, 4, 3, 2, stride=2, padding=(1, 0), dilation=(1, 2), groups=2, layout="nhwc", bias=True),
        Conv2d(1, 3, 5, 5, 3, 1, 1, groups=3),
        Conv2d(1, 2, 6, 6, 2, 3, 3, stride=3, padding=2, dtype="bf16"),
    ],
)
def test_conv_reference_against_the_definition(op):
    inputs = op.random_inputs(np.random.default_rng(1))
    assert np.allclose(op.reference(inputs), _naive_conv(op, inputs), rtol=1e-12, atol=1e-12)


def test_gemm_reference_layouts_and_epilogue():
    rng = np.random.default_rng(2)
    op = Gemm(5, 3, 4, layout_a="col", layout_b="col", epilogue="bias,gelu,scale,residual", alpha=0.5)
    i = op.random_inputs(rng)
    assert i["a"].shape == (4, 5) and i["b"].shape == (3, 4)
    c = i["a"].T.astype(np.float64) @ i["b"].T.astype(np.float64) + i["bias"]
    c = 0.5 * c * (1 + np.tanh(math.sqrt(2 / math.pi) * (c + 0.044715 * c**3)))
    c = 0.5 * c + i["residual"]
    assert np.allclose(op.reference(i), c)


def test_inputs_are_fresh_and_never_zero():
    op = Gemm(64, 64, 64, epilogue="bias")
    a = op.random_inputs(np.random.default_rng())
    b = op.random_inputs(np.random.default_rng())
    assert not np.array_equal(a["a"], b["a"])
    assert np.count_nonzero(a["a"]) == a["a"].size and np.count_nonzero(a["bias"]) == 64


def test_softmax_reference_is_stable():
    op = Softmax(3, 1000, "fp16")
    x = op.random_inputs(np.random.default_rng(3))
    ref = op.reference(x)
    assert np.allclose(ref.sum(axis=1), 1.0) and np.isfinite(ref).all()
    # the inputs sit near 40 +- 16, so exp without the max subtraction overflows fp16 (and the sum, fp32)
    assert not np.isfinite(np.exp(to_float64(x["x"], op.dtype).astype(np.float16))).all()


def test_bf16_rounding_is_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.0e38, np.inf, 1e-40], np.float32)
    bits = bf16_from_float(x)
    back = bf16_to_float32(bits)
    assert back[0] == 1.0
    assert back[1] == 1.0  # exactly halfway: ties to even (1.0)
    assert back[2] == 1.015625  # halfway above an odd mantissa: rounds up
    assert back[3] == -2.5 and np.isinf(back[5])
    assert np.isnan(bf16_to_float32(bf16_from_float(np.array([np.nan], np.float32))))[0]


def test_dtype_parsing():
    assert parse_dtype("BF16") is DType.BF16 and parse_dtype("half") is DType.FP16
    with pytest.raises(BadInputError, match="dtype"):
        parse_dtype("int4")


def test_json_round_trip_and_signature():
    for op in (Gemm(3, 5, 7, "fp16", "col", "row", "bias,relu"), Conv2d(1, 3, 8, 8, 4, 3, 3, stride=(2, 1)), Softmax(2, 3)):
        back = Op.from_json(op.to_json())
        assert back == op and back.signature == op.signature
    with pytest.raises(BadInputError, match="unknown operation"):
        Op.from_json({"op": "pooling"})


def test_relative_error_and_tolerance():
    ref = np.ones((4, 4))
    assert relative_error(ref + 1e-6, ref) == pytest.approx(1e-6)
    assert relative_error(np.full((4, 4), np.nan), ref) == math.inf
    assert relative_error(np.ones((4, 5)), ref) == math.inf
    assert tolerance(Gemm(4, 4, 4)) < tolerance(Gemm(4, 4, 4, dtype="fp16")) < tolerance(Gemm(4, 4, 4, dtype="bf16"))


def test_each_op_says_how_it_is_shown():
    """The texts the suite table, the report and the plot print, and the NVTX phase of timing a kernel,
    as each op answers them (they were decisions by kind in tracea_cli/suite.py, reports/ and
    emitters/nvtx.py; the texts are the same)."""
    from tracea.kernels import Attention
    from tracea.reports.summary import shape_label

    gemm = Gemm(64, 32, 16, dtype="bf16", epilogue="bias,relu")
    conv = Conv2d(n=2, c=3, h=9, w=9, k=8, r=3, s=3, stride=(1, 2), padding=1, layout="nhwc", dtype="fp16")
    attention = Attention(batch=1, heads=2, seq_q=64, head_dim=64)
    assert gemm.case_label() == "gemm 64x32x16 bf16 bias relu"
    assert Conv2d(32, 256, 56, 56, 256, 3, 3, padding=1).case_label() == "conv2d n32 c256 56x56 k256 3x3 s1 p1 nchw fp32"
    assert conv.case_label() == "conv2d n2 c3 9x9 k8 3x3 s[1, 2] p1 nhwc fp16"
    assert Softmax(7, 100).case_label() == "softmax 7x100 fp32"
    assert attention.case_label() == attention.signature

    def row(op):
        shape = {k: v for k, v in op.to_json().items() if k not in ("op", "schema_version", "dtype")}
        return {"op": op.kind, "shape": json.dumps(shape, sort_keys=True)}  # as emitters/bench.py writes it

    assert [shape_label(row(op)) for op in (gemm, conv, Softmax(7, 100))] == ["64x32x16", "n2 c3 9x9 k8", "7x100"]
    assert shape_label(row(attention)) == ("batch=1,block_mask=None,causal=False,head_dim=64,heads=2,kv_heads=2,"
                                           "scale=0.125,seq_k=64,seq_q=64,window=None")
    assert shape_label({"op": "pooling", "shape": '{"a": 1, "b": [1], "c": "x"}'}) == "a=1,c=x"
    assert shape_label({"op": "gemm", "shape": '{"m": 3}'}) == "3xNonexNone"
    assert shape_label({"op": "gemm", "shape": "not json"}) == "not json"
    assert [op.plot_marker for op in (gemm, conv, Softmax(2, 3), attention)] == ["o", "s", "^", "o"]
    assert [op.phase for op in (gemm, conv, Softmax(2, 3), attention)] == ["mma", "mma", "reduce", "mma"]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_random_operands_hold_no_zero_even_when_the_generator_draws_one(dtype):
    """NumPy's float32 normals are exactly 0.0 about once in 2^23 draws (this test file's own
    test_inputs_are_fresh_and_never_zero met one), and a tiny draw rounds to 0 in a 16-bit type."""
    from tracea.kernels import fields
    from tracea.kernels.dtypes import to_float64

    class Draws:  # a generator whose draws include +0, -0 and values that underflow in fp16 and bf16
        def standard_normal(self, shape, dtype):
            x = np.random.default_rng(0).standard_normal(shape, dtype=dtype)
            x.flat[:4] = (0.0, -0.0, 1e-30, -1e-45)
            return x

    x = fields.random(Draws(), (8, 16), DType(dtype), scale=0.5)
    values = to_float64(x, DType(dtype))
    assert np.count_nonzero(values) == values.size and np.isfinite(values).all()
    assert values.flat[0] == values.flat[1] == 0.5 / 256  # the stand-in for a zero
    assert np.array_equal(values.ravel()[4:], to_float64(fields.to_storage(
        np.random.default_rng(0).standard_normal((8, 16), dtype=np.float32) * np.float32(0.5), DType(dtype)),
        DType(dtype)).ravel()[4:])  # every other draw as it was
