"""The Metal implicit-GEMM conv2d (emitters/metal/gemm.py's conv loader, cores/conv2d.py): what it refuses,
its launch, and its runs on the CPU simulator (emitters/metal/simulate.py) against the float64 reference:
1x1, 3x3 padded, 7x7 stride 2, dilation, asymmetric strides and padding, with and without a bias, in fp32,
fp16 and bf16, the output pre-filled with NaN so that an element never written shows."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tracea.doctor.errors import UnsupportedError
from tracea.emitters.metal import gemm as g
from tracea.emitters.metal.cores import core_for
from tracea.kernels import Conv2d
from tracea.kernels.dtypes import to_float64
from tracea.kernels.op import relative_error, tolerance

CORE = core_for(Conv2d(1, 4, 5, 5, 4, 3, 3, layout="nhwc"))


def test_only_nhwc_convolutions_with_groups_1():
    with pytest.raises(UnsupportedError, match="NHWC convolutions with groups 1"):
        core_for(Conv2d(1, 4, 5, 5, 4, 3, 3, layout="nchw"))
    with pytest.raises(UnsupportedError, match="NHWC convolutions with groups 1"):
        core_for(Conv2d(1, 4, 5, 5, 4, 3, 3, groups=2, layout="nhwc"))


def test_input_coordinates_past_32_bit_ints_are_refused():
    """The kernel computes an input row as (p * stride - padding + r * dilation) in int: a shape whose largest
    such coordinate passes 2^31 is refused in one line, one just inside it is taken."""
    with pytest.raises(UnsupportedError, match="the input row .* GEMM extents up to"):
        core_for(Conv2d(1, 1, 3, 1, 1, 2, 1, dilation=(1 << 30, 1), layout="nhwc", padding=(1 << 30, 0)))
    core_for(Conv2d(1, 1, 3, 1, 1, 2, 1, dilation=(1 << 20, 1), layout="nhwc", padding=(1 << 20, 0)))


def test_the_launch_names_the_shape_and_the_bias_only_when_there_is_one():
    op = Conv2d(2, 8, 9, 11, 16, 3, 5, stride=(1, 2), padding=(1, 2), dilation=(2, 1), layout="nhwc", dtype="fp16")
    ln = CORE.render(op, CORE.hero(op, 10))
    assert ln.args == (("in", "x"), ("in", "weight"), ("out", None),
                       *(("i32", v) for v in (2, 9, 11, 8, op.p, op.q, 16, 3, 5, 1, 2, 1, 2, 2, 1)))
    assert "bias" not in ln.source and ln.name == g.CONV_KERNEL
    assert ln.grid == (-(-op.gemm_n // CORE.hero(op, 10).bn), -(-op.gemm_m // CORE.hero(op, 10).bm), 1)
    with_bias = CORE.render(Conv2d(2, 8, 9, 11, 16, 3, 5, layout="nhwc", bias=True), CORE.hero(op, 10))
    assert with_bias.args[:4] == (("in", "x"), ("in", "weight"), ("in", "bias"), ("out", None))
    assert re.search(r"device const float\* bias \[\[buffer\(2\)\]\]", with_bias.source)
    assert "const int M = NB * P * Q, K = R * S * C;" in with_bias.source


def test_the_hero_follows_the_implicit_gemm():
    op = Conv2d(32, 64, 56, 56, 64, 3, 3, padding=1, layout="nhwc", dtype="fp16")
    assert CORE.hero(op, 16) == g.MetalGemmSchedule(64, 64, 16, 2, 2, 8)
    small = Conv2d(1, 3, 8, 8, 16, 3, 3, padding=1, layout="nhwc")
    assert CORE.hero(small, 16).bm == 32  # 64 rows of M: tiles of 32 give the cores more threadgroups
    assert CORE.space(small, CORE.hero(small, 16))[0] == CORE.hero(small, 16)


@pytest.fixture(scope="module")
def simulate():
    from tracea.emitters.metal import simulate as module  # a failing import fails these tests, not skips them

    return module


def run_conv(simulate, op: Conv2d, schedule: g.MetalGemmSchedule, seed: int = 0) -> None:
    ln = CORE.render(op, schedule)
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), np.nan, dtype=np.float32).astype(op.dtype.storage) if op.dtype.value != "bf16" \
        else np.full(op.output_shape(), 0x7FC0, dtype=np.uint16)  # bf16's NaN
    simulate.run(ln, inputs, out)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), f"{op.case_label()} {schedule.name}: relative error {err:.3g}"


SMALL = g.MetalGemmSchedule(32, 32, 16, 2, 2, 8)
CASES = {
    "1x1": dict(n=2, c=12, h=5, w=6, k=20, r=1, s=1),
    "3x3 padded": dict(n=1, c=5, h=9, w=7, k=11, r=3, s=3, padding=(1, 1)),
    "7x7 stride 2": dict(n=1, c=3, h=15, w=13, k=8, r=7, s=7, stride=(2, 2), padding=(3, 3)),
    "dilation": dict(n=1, c=4, h=11, w=10, k=6, r=3, s=3, dilation=(2, 3), padding=(2, 1)),
    "asymmetric": dict(n=2, c=6, h=10, w=12, k=9, r=3, s=5, stride=(1, 2), padding=(0, 2)),
}


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("case", list(CASES))
def test_convolutions_on_the_simulator(simulate, case, dtype):
    # the bias in turn: on for fp32 and bf16, off for fp16 (each kernel form once)
    op = Conv2d(**CASES[case], layout="nhwc", dtype=dtype, bias=dtype != "fp16")
    run_conv(simulate, op, SMALL)


@pytest.mark.parametrize("schedule", [g.MetalGemmSchedule(128, 64, 32, 4, 2, 4), g.MetalGemmSchedule(64, 128, 8, 2, 4, 0),
                                      g.MetalGemmSchedule(32, 32, 32, 1, 1, 16)], ids=lambda s: s.name)
def test_other_tiles_of_the_space_on_the_simulator(simulate, schedule):
    op = Conv2d(2, 7, 12, 9, 70, 3, 3, stride=(2, 1), padding=(1, 1), layout="nhwc", dtype="bf16", bias=True)
    schedule.validate(op)
    run_conv(simulate, op, schedule, seed=2)


def test_the_hero_on_the_simulator(simulate):
    op = Conv2d(1, 16, 10, 10, 70, 3, 3, padding=1, layout="nhwc", dtype="fp16", bias=True)
    hero = CORE.hero(op, 2)
    assert (hero.bm, hero.bn) == (64, 64)
    run_conv(simulate, op, hero, seed=5)
