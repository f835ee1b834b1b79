"""The 8-bit types (kernels/dtypes.py) and the scaled GEMM's IR (kernels/ops/scaled_gemm.py): FP8 codes against
values worked out by hand from the formats' definitions (OCP FP8: e4m3 without infinities, e5m2 IEEE-like), the
rounding to nearest even and the saturation, int8's storage, the scaled references against hand-computed cases,
and every bad input one line naming its field."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.kernels import Gemm, Op, ScaledGemm, tolerance
from tracea.kernels.dtypes import FP8_VALUES, DType, parse_dtype, to_float64, to_storage


@pytest.mark.parametrize(("code", "value"), [
    (0x00, 0.0), (0x80, -0.0), (0x01, 2.0**-9), (0x07, 7 * 2.0**-9), (0x08, 2.0**-6), (0x38, 1.0), (0x39, 1.125),
    (0x7E, 448.0), (0xFE, -448.0), (0x3F, 1.875), (0x40, 2.0)])
def test_e4m3_codes(code, value):
    got = FP8_VALUES[DType.FP8E4M3][code]
    assert got == value and np.signbit(got) == np.signbit(value)


@pytest.mark.parametrize(("code", "value"), [
    (0x00, 0.0), (0x01, 2.0**-16), (0x04, 2.0**-14), (0x3C, 1.0), (0x3D, 1.25), (0x7B, 57344.0), (0x7C, np.inf),
    (0xFC, -np.inf)])
def test_e5m2_codes(code, value):
    assert FP8_VALUES[DType.FP8E5M2][code] == value


def test_fp8_nans_and_the_finite_tables():
    e4, e5 = FP8_VALUES[DType.FP8E4M3], FP8_VALUES[DType.FP8E5M2]
    assert np.isnan(e4[0x7F]) and np.isnan(e4[0xFF]) and np.isnan(e4).sum() == 2  # e4m3fn: only S.1111.111
    assert np.isnan(e5[[0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]]).all() and np.isnan(e5).sum() == 6
    finite = e4[np.isfinite(e4)]
    assert len(finite) == 254 and finite.max() == 448.0 == DType.FP8E4M3.max_finite


def test_fp8_rounding_is_to_nearest_even_and_saturating():
    e4 = DType.FP8E4M3
    x = np.array([1.0625, 1.1875, 2.0**-10, 3 * 2.0**-10, 447.9, 464.0, 1e30, -1e30, np.inf, np.nan, -0.0])
    codes = to_storage(x, e4)
    # 1.0625: halfway 1 (0x38) / 1.125 (0x39) -> even 0x38; 1.1875 -> 1.25 (0x3A); 2^-10: halfway 0 / 2^-9 -> 0;
    # 3 * 2^-10: halfway 2^-9 (0x01) / 2^-8 (0x02) -> 0x02; past 448 (even 464, the next step) -> 448
    assert list(codes[:9]) == [0x38, 0x3A, 0x00, 0x02, 0x7E, 0x7E, 0x7E, 0xFE, 0x7E]
    assert codes[9] == 0x7F and codes[10] == 0x80
    e5 = DType.FP8E5M2
    assert list(to_storage(np.array([1.125, 1.375, 6e4, -np.inf]), e5)) == [0x3C, 0x3E, 0x7B, 0xFB]
    # every finite code decodes and encodes back to itself
    for d in (e4, e5):
        codes = np.array([c for c in range(256) if np.isfinite(FP8_VALUES[d][c])], dtype=np.uint8)
        assert np.array_equal(to_storage(to_float64(codes, d), d), codes)


@pytest.mark.parametrize("d", [DType.FP8E4M3, DType.FP8E5M2])
def test_fp8_rounding_matches_a_search_over_the_codes(d):
    """The bit-level conversion against the plain definition: the nearest finite code, ties to the even code, on
    every value, every midpoint between neighbours (and the doubles either side), subnormals and saturation."""
    table = FP8_VALUES[d][:128]
    finite = table[np.isfinite(table)]  # codes 0 .. max, increasing
    mids = (finite[1:] + finite[:-1]) / 2
    rng = np.random.default_rng(7)
    x = np.concatenate([finite, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), [0.0, 5e-324, 1e300],
                        rng.standard_normal(20000) * 10.0 ** rng.uniform(-4, 5, 20000)])
    x = np.concatenate([x, -x])
    mag = np.minimum(np.abs(x), d.max_finite)
    dist = np.abs(mag[:, None] - finite[None, :])
    best = dist.min(axis=1, keepdims=True)
    ties = dist == best  # one or two codes: of two, the even one
    expected = np.where(ties.sum(axis=1) > 1, np.argmax(ties & (np.arange(len(finite)) % 2 == 0), axis=1),
                        np.argmax(ties, axis=1)).astype(np.uint8)
    expected = np.where(np.signbit(x), expected | 0x80, expected)
    assert np.array_equal(to_storage(x, d), expected)
    assert to_storage(np.float64(-0.0), d) == 0x80 and to_storage(np.array([np.nan]), d)[0] == 0x7F


def test_the_fused_epilogue_follows_the_scaling():
    op = ScaledGemm(2, 3, 128, "int8", "fp32", "tensor", epilogue="bias,relu,scale,residual", alpha=2.0)
    assert op.shapes()["bias"] == (3,) and op.shapes()["residual"] == (2, 3)
    assert op.input_dtype("bias") == np.float32 and ScaledGemm(2, 3, 128, out_dtype="bf16",
                                                               epilogue="bias").input_dtype("bias") == np.uint16
    a = np.ones((2, 128), np.int8)
    b = np.full((3, 128), 2, np.int8)
    b[1] = -2
    inputs = {"a": a, "b": b, "scale_a": np.array([0.5], np.float32), "scale_b": np.array([0.25], np.float32),
              "bias": np.array([1.0, 0.0, -100.0], np.float32), "residual": np.full((2, 3), 0.5, np.float32)}
    # 128 * 2 * 0.5 * 0.25 = 32 (or -32): + bias, relu, * 2, + 0.5
    assert np.array_equal(op.reference(inputs), [[66.5, 0.5, 0.5], [66.5, 0.5, 0.5]])
    assert ScaledGemm.from_json(op.to_json()) == op and op.case_label().endswith("tensor->fp32 bias relu scale residual")
    assert op.flops == 2 * 2 * 3 * 128 + 4 * 6
    with pytest.raises(BadInputError, match="int32 accumulator"):
        ScaledGemm(2, 3, 128, "int8", "int32", "none", epilogue="relu")
    with pytest.raises(BadInputError, match="unknown op"):
        ScaledGemm(2, 3, 128, epilogue="bias,swish")
    with pytest.raises(BadInputError, match="alpha"):
        ScaledGemm(2, 3, 128, epilogue="scale", alpha=float("inf"))


def test_int_storage_rounds_and_saturates():
    assert list(to_storage(np.array([1.5, 2.5, -2.5, -200.0, 300.0, 127.4]), DType.INT8)) == [2, 2, -2, -128, 127, 127]
    assert to_storage(np.array([3e9]), DType.INT32)[0] == 2**31 - 1


def test_float_ops_refuse_8_bit_types_with_a_pointer():
    with pytest.raises(BadInputError, match=r"dtype: int8 is not taken here; use fp32, fp16, bf16 .*scaled_gemm"):
        Gemm(4, 4, 4, dtype="int8")
    assert parse_dtype("e4m3", allowed=(DType.FP8E4M3,)) is DType.FP8E4M3
    with pytest.raises(BadInputError, match="unknown type 'fp12'"):
        parse_dtype("fp12")


def _hand(op: ScaledGemm, a, b, sa=None, sb=None):
    inputs = {"a": np.array(a, dtype=op.dtype.storage), "b": np.array(b, dtype=op.dtype.storage)}
    if sa is not None:
        inputs["scale_a"] = np.array(sa, dtype=np.float32)
        inputs["scale_b"] = np.array(sb, dtype=np.float32)
    return op.reference(inputs)


def test_references_against_hand_computed_cases():
    # A = [[1, 2], [3, 4]], B (col: n x k) = [[5, 6], [7, 8]] -> A @ B^T = [[17, 23], [39, 53]]
    raw = _hand(ScaledGemm(2, 2, 2, scale="none", out_dtype="int32"), [[1, 2], [3, 4]], [[5, 6], [7, 8]])
    assert raw.tolist() == [[17, 23], [39, 53]]
    row = ScaledGemm(2, 2, 2, scale="row", layout_b="row")  # B given k x n: [[5, 7], [6, 8]] is the same B
    assert _hand(row, [[1, 2], [3, 4]], [[5, 7], [6, 8]], [0.5, 2.0], [1.0, 0.25]).tolist() == [[8.5, 2.875],
                                                                                              [78.0, 26.5]]
    assert _hand(ScaledGemm(2, 2, 2, scale="tensor"), [[1, 2], [3, 4]], [[5, 6], [7, 8]], [0.5], [4.0]).tolist() == \
        [[34.0, 46.0], [78.0, 106.0]]
    # block128: K = 256 in two blocks, each block's sum scaled by its own pair of scales
    op = ScaledGemm(1, 1, 256, scale="block128")
    a, b = np.ones((1, 256)), np.ones((1, 256))
    a[0, 128:] = 2
    assert _hand(op, a, b, [[1.0, 0.5]], [[3.0], [10.0]]).tolist() == [[128 * 3.0 + 256 * 0.5 * 10.0]]
    # FP8: e4m3 codes 0x38 (1.0) and 0x40 (2.0), 0x39 (1.125) -> 1 * 1.125 + 2 * 2 = 5.125, times 0.5 * 2
    fp8 = ScaledGemm(1, 1, 2, dtype="fp8e4m3", scale="tensor")
    assert _hand(fp8, [[0x38, 0x40]], [[0x39, 0x40]], [0.5], [2.0]).tolist() == [[5.125]]


def test_ir_values_round_trip_and_count():
    op = ScaledGemm(16, 4096, 4096, scale="row", out_dtype="bf16")
    assert Op.from_json(op.to_json()) == op and op.output_dtype is DType.BF16
    assert op.shapes() == {"a": (16, 4096), "b": (4096, 4096), "scale_a": (16,), "scale_b": (4096,)}
    assert op.bytes == 16 * 4096 + 4096 * 4096 + 2 * 16 * 4096 + 4 * (16 + 4096)
    assert op.flops == 2 * 16 * 4096 * 4096 and tolerance(op) == 8 * 2.0**-8
    assert tolerance(ScaledGemm(1, 1, 1, scale="none", out_dtype="int32")) == 0.0
    block = ScaledGemm(3, 300, 256, scale="block128")
    assert block.shapes()["scale_a"] == (3, 2) and block.shapes()["scale_b"] == (2, 3)
    inputs = block.random_inputs(np.random.default_rng(0))
    assert {k: v.dtype for k, v in inputs.items()} == {"a": np.int8, "b": np.int8, "scale_a": np.float32,
                                                        "scale_b": np.float32}
    assert (inputs["a"] != 0).all() and inputs["a"].min() == -128  # the whole range, never zero
    assert 0.1 < np.abs(block.reference(inputs)).mean() < 10  # scales bring outputs near unit size


@pytest.mark.parametrize(("fields", "word"), [
    (dict(dtype="bf16"), "dtype: bf16 is not taken"), (dict(out_dtype="fp8e4m3"), "out_dtype"),
    (dict(scale="rows"), "scale"), (dict(out_dtype="int32"), "int32 accumulator"),
    (dict(scale="none"), "int32 accumulator"), (dict(dtype="fp8e5m2", scale="none", out_dtype="int32"), "only it"),
    (dict(scale="block128", k=200), "multiple of 128"), (dict(k=131072), "overflow"), (dict(layout_b="nk"), "layout_b"),
    (dict(m=0), "m: must be positive")])
def test_bad_fields_are_one_line(fields, word):
    with pytest.raises(BadInputError, match=word):
        ScaledGemm(**{"m": 4, "n": 4, "k": 128, **fields})


def test_check_scales_names_the_problem():
    op = ScaledGemm(4, 8, 128, scale="row")
    ok = {"scale_a": np.ones(4, np.float32), "scale_b": np.ones(8, np.float32)}
    op.check_scales(ok)
    for bad, word in [({"scale_a": ok["scale_a"]}, "scale_b: missing"), ({**ok, "scale_a": np.ones(5)}, "shape"),
                      ({**ok, "scale_b": np.array([1.0] * 7 + [np.nan])}, "non-finite")]:
        with pytest.raises(BadInputError, match=word):
            op.check_scales(bad)


def _fp8_out_inputs(op: ScaledGemm, a: np.ndarray, b: np.ndarray, so: float) -> dict[str, np.ndarray]:
    return {"a": to_storage(a, op.dtype), "b": to_storage(b, op.dtype), "scale_a": np.array([0.5], np.float32),
            "scale_b": np.array([0.25], np.float32), "scale_out": np.array([so], np.float32),
            "amax": np.full(1, -7.0, np.float32)}


def test_an_fp8_output_is_the_scaled_value_times_scale_out_rounded_and_saturated():
    """By hand: A = [[1, 2], [3, 4]] (e4m3), B n x k = [[1, 1], [2, -1]], scales 0.5 and 0.25: v = (A @ B^T) / 8 =
    [[3, 0], [7, 2]] / 8; scale_out 100: 37.5, 0, 87.5, 25. e4m3 (3 mantissa bits): 37.5 -> 36 (steps of 4 from 32),
    87.5 -> 88 (steps of 8 from 64), 25 -> 24 (steps of 2 from 16: a tie between 24 and 26, to the even code 24 =
    1.100b x 2^4). scale_out 2000: 750, 1750 saturate to 448; 500
    too. amax is the largest |v| before scale_out: 7/8, whatever the buffer held."""
    op = ScaledGemm(m=2, n=2, k=2, dtype="fp8e4m3", out_dtype="fp8e4m3", scale="tensor")
    a, b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 1.0], [2.0, -1.0]])
    inputs = _fp8_out_inputs(op, a, b, 100.0)
    assert op.reference(inputs).tolist() == [[36.0, 0.0], [88.0, 24.0]]
    assert op.side_reference(inputs)["amax"].tolist() == [7 / 8]
    assert op.reference(_fp8_out_inputs(op, a, b, 2000.0)).tolist() == [[448.0, 0.0], [448.0, 448.0]]
    neg = _fp8_out_inputs(op, a, -b, 2000.0)
    assert op.reference(neg).tolist() == [[-448.0, 0.0], [-448.0, -448.0]]
    assert op.side_problem(inputs) is not None  # the buffer still holds -7: the check names it
    inputs["amax"][:] = 7 / 8
    assert op.side_problem(inputs) is None
    e5 = ScaledGemm(m=2, n=2, k=2, dtype="fp8e4m3", out_dtype="fp8e5m2", scale="tensor")
    # e5m2 (2 mantissa bits): 37.5 -> 40 (32, 40, 48 ..), 87.5 -> 80 (64, 80, 96 ..), 25 -> 24 (16, 20, 24, 28 ..)
    assert e5.reference(_fp8_out_inputs(e5, a, b, 100.0)).tolist() == [[40.0, 0.0], [80.0, 24.0]]
    assert e5.reference(_fp8_out_inputs(e5, a, b, 1e5)).tolist() == [[40960.0, 0.0], [57344.0, 24576.0]]


def test_an_fp8_output_takes_its_scale_and_amax_beside_the_operands():
    op = ScaledGemm(m=4, n=8, k=64, dtype="fp8e5m2", out_dtype="fp8e4m3", scale="row", epilogue="bias,residual")
    shapes = op.shapes()
    assert shapes["scale_out"] == (1,) and shapes["amax"] == (1,) and op.side_outputs() == {"amax": (1,)}
    assert op.input_dtype("amax") == np.float32 and op.input_dtype("scale_out") == np.float32
    assert op.operand_dtype is DType.BF16 and op.input_dtype("bias") == np.uint16  # bf16 operands beside FP8 C
    assert op.output_dtype.storage == np.uint8 and tolerance(op) == DType.FP8E4M3.unit_roundoff / 4
    inputs = op.random_inputs(np.random.default_rng(0))
    assert set(inputs) == set(shapes) and 0 < inputs["scale_out"][0] < 448
    v = op._value(inputs)
    assert np.allclose(op.reference(inputs), to_float64(to_storage(v * inputs["scale_out"][0], op.out_dtype),
                                                       op.out_dtype))
    assert op.side_reference(inputs)["amax"][0] == np.abs(v).max()
    plain = ScaledGemm(m=4, n=8, k=64, dtype="fp8e4m3", out_dtype="bf16", scale="row")
    assert "amax" not in plain.shapes() and plain.side_outputs() == {} and plain.side_problem({}) is None
    gemm = Gemm(m=4, n=8, k=16)  # an op without side outputs reads none (an inf input is no side problem)
    assert gemm.side_reference({"a": np.full((4, 16), np.inf)}) == {}
    assert gemm.side_problem({"a": np.full((4, 16), np.inf)}) is None
    with pytest.raises(BadInputError, match="scale_out: holds a non-finite"):
        op.check_scales({"scale_a": inputs["scale_a"], "scale_b": inputs["scale_b"],
                         "scale_out": np.array([np.inf], np.float32)})


@pytest.mark.parametrize(("kw", "word"), [
    ({"dtype": "int8", "out_dtype": "fp8e4m3", "scale": "row"}, "FP8 output takes FP8 inputs"),
    ({"dtype": "int8", "out_dtype": "fp8e5m2", "scale": "none"}, "out_dtype fp8e5m2"),
    ({"dtype": "fp8e4m3", "out_dtype": "fp8e4m3", "scale": "none"}, "int32 accumulator"),
])
def test_fp8_outputs_refuse_what_they_cannot_be(kw, word):
    with pytest.raises(BadInputError, match=word):
        ScaledGemm(m=16, n=16, k=128, **kw)
