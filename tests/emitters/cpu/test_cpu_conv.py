"""Conv2d as implicit GEMM, compiled and run on every family this machine can run: NCHW and NHWC,
strides, padding, dilation, groups (depthwise too), bias, 1x1 filters, fp32/fp16/bf16, and a K
(= C/groups x R x S) longer than one K block."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fp32_checks import verify_on_fresh_inputs  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.kernels import Conv2d, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")

CASES = [
    # n, c, h, w, k, r, s, stride, padding, dilation, groups, bias, dtype
    (1, 3, 7, 7, 8, 3, 3, 1, 1, 1, 1, False, "fp32"),
    (2, 6, 9, 11, 8, 3, 3, 2, (1, 2), (2, 1), 2, True, "fp32"),
    (1, 16, 33, 20, 33, 1, 1, 1, 0, 1, 1, True, "fp32"),
    (3, 8, 12, 10, 8, 3, 3, 1, 1, 1, 8, False, "fp32"),  # depthwise
    (1, 4, 40, 50, 33, 5, 3, (2, 1), 2, 1, 1, True, "fp16"),
    (2, 6, 15, 15, 12, 3, 3, 1, 2, 2, 3, False, "bf16"),
    (1, 128, 8, 9, 16, 3, 3, 1, 1, 1, 1, False, "fp16"),  # K = 1152: fp32 sums in the workspace
    (1, 256, 6, 6, 40, 3, 3, 1, 0, 1, 1, True, "fp32"),  # K = 2304: three K blocks into the output
]


pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])) + f"-g{c[10]}-{c[12]}")
def test_conv2d_matches_the_reference(family, layout, case):
    n, c, h, w, k, r, s, stride, padding, dilation, groups, bias, dtype = case
    v = cpu.resolve(f"{family}.conv2d")
    if v.unmet(HOST, dtype):
        pytest.skip(f"{v.id} cannot run here: {'; '.join(v.unmet(HOST, dtype))}")
    op = Conv2d(n, c, h, w, k, r, s, stride=stride, padding=padding, dilation=dilation, groups=groups,
                layout=layout, bias=bias, dtype=dtype)
    kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
    inputs = op.random_inputs(np.random.default_rng())
    out = np.empty(op.output_shape(), op.dtype.storage)
    assert kernel(inputs, out) is out
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), f"{op.signature}: relative error {err:.3g}"


# The direct path (emitters/cpu/conv_direct.py: fp32 NHWC, A read in place from the input or a padded /
# subsampled copy): 1x1 plain GEMMs, strided 1x1, and stride-1 filters on "virtual" rows of the padded
# width, across images, with dilation, asymmetric padding, bias, K blocks held inside one filter tap.
DIRECT = [
    # n, c, h, w, k, r, s, stride, padding, dilation, bias
    (1, 16, 33, 20, 33, 1, 1, 1, 0, 1, True),  # 1x1: the input is A
    (2, 24, 13, 9, 70, 1, 1, 2, 0, 1, False),  # strided 1x1: a subsampled copy
    (1, 8, 11, 17, 40, 1, 1, (2, 3), 0, 1, True),
    (3, 5, 9, 7, 19, 3, 3, 1, 1, 1, True),  # odd channels, three images on one virtual row range
    (2, 12, 10, 13, 64, 3, 5, 1, (1, 2), (2, 1), False),  # dilation, asymmetric padding
    (1, 7, 6, 6, 9, 2, 2, 1, 0, 2, True),  # no padding, dilated 2x2
    (1, 1100, 5, 4, 20, 3, 3, 1, 1, 1, False),  # C above KC: K blocks of a divisor of C inside each tap
    (1, 32, 7, 7, 96, 7, 7, 1, 3, 1, True),  # a filter as wide as the image
    (1, 3, 23, 21, 16, 7, 7, 2, 3, 1, True),  # strided: gathered, runs of S*C values (a stem)
    (2, 3, 20, 64, 64, 7, 7, 2, 3, 1, False),  # a stem wide enough for whole tiles inside a row
    (1, 64, 102, 103, 16, 5, 5, 2, 2, 1, True),  # 17 MB of patches: gathered while packing, not copied
    (2, 17, 9, 10, 40, 3, 3, (2, 1), (1, 2), (1, 2), False),  # strided, dilated: tap by tap at the edges
]


def _direct_op(case):
    n, c, h, w, k, r, s, stride, padding, dilation, bias = case
    return Conv2d(n, c, h, w, k, r, s, stride=stride, padding=padding, dilation=dilation, layout="nhwc",
                  bias=bias, dtype="fp32")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", DIRECT, ids=lambda c: "x".join(map(str, c[:7])) + f"-st{c[7]}-d{c[9]}")
def test_direct_path_matches_the_reference(family, threads, case):
    import dataclasses

    op = _direct_op(case)
    v = cpu.resolve(f"{family}.conv2d")
    if v.unmet(HOST, "fp32"):
        pytest.skip(f"{v.id} cannot run here")
    s = dataclasses.replace(cpu.hero_schedule(op, v, HOST), pack_a=False, pack_b=True,
                            threads=min(threads, HOST.cpu.logical_cores or 1))
    kernel = cpu.build(op, v, s, HOST)
    rng = np.random.default_rng()
    for _ in range(2):  # a second call reuses the copies' buffers: stale contents must not leak in
        inputs = op.random_inputs(rng)
        out = np.full(op.output_shape(), np.nan, np.float32)
        kernel(inputs, out)
        err = relative_error(out.astype(np.float64), op.reference(inputs))
        assert err <= tolerance(op), f"{op.signature} {s.name}: relative error {err:.3g}"


@pytest.mark.parametrize("kwargs, why", [
    (dict(dtype="fp16"), "fp32"),
    (dict(layout="nchw"), "NHWC"),
    (dict(groups=2), "groups = 1"),
])
def test_direct_path_refuses_what_it_cannot_compute(kwargs, why):
    import dataclasses

    from tracea.doctor.errors import BadInputError

    base = dict(n=1, c=8, h=9, w=9, k=16, r=3, s=3, padding=1, layout="nhwc", dtype="fp32")
    op = Conv2d(**(base | kwargs))
    v = cpu.resolve("cpu-portable.conv2d")
    hero = cpu.hero_schedule(op, v, HOST)
    assert hero.pack_a  # the packed path for these
    with pytest.raises(BadInputError, match=why):
        cpu.build(op, v, dataclasses.replace(hero, pack_a=False), HOST)


def test_micro_kernel_fits_the_output_channels():
    """An AVX-512 NHWC conv with 64 output channels gets a micro-kernel 32 or 64 wide (no third-full
    panel); 96 channels keep the 48-wide one; the space starts at the hero and holds both paths."""
    v = cpu.resolve("cpu-avx512.conv2d")
    wide = Conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, layout="nhwc", dtype="fp32")
    few = Conv2d(1, 512, 7, 7, 512, 1, 1, layout="nhwc", dtype="fp32")
    assert (cpu.hero_schedule(wide, v, HOST).nr, cpu.hero_schedule(few, v, HOST).nr) == (64, 32)
    assert cpu.hero_schedule(Conv2d(1, 64, 30, 30, 96, 3, 3, padding=1, layout="nhwc", dtype="fp32"),
                             v, HOST).nr == 48
    space = cpu.search_space(wide, v, HOST)
    assert not space[0].pack_a and space[0].nr == 64
    assert any(s.pack_a for s in space) and sum(not s.pack_a for s in space) > 1


def test_torch_baseline_computes_the_same_conv():
    """The suite's conv baseline (torch, channels-last) agrees with the float64 reference."""
    pytest.importorskip("torch")
    from tracea.emitters.baselines.conv2d import host as conv2d_baseline

    op = Conv2d(2, 12, 10, 13, 20, 3, 3, padding=1, layout="nhwc", bias=True, dtype="fp32")
    inputs = op.random_inputs(np.random.default_rng())
    base = conv2d_baseline(op, inputs)
    assert base.run is not None
    assert relative_error(np.asarray(base.run(), np.float64), op.reference(inputs)) <= tolerance(op)


# The small-M form (emitters/cpu/conv_small.py, pack_b off: the filter read in place as the broadcast
# operand, the patches packed with any stride, padding and dilation, the sums transposed into NHWC).
SMALL = [
    # n, c, h, w, k, r, s, stride, padding, dilation, bias
    (1, 24, 9, 9, 70, 3, 3, 2, 1, 1, True),  # strided 3x3 (the hero's case)
    (2, 5, 7, 6, 33, 3, 2, (2, 1), (1, 0), (1, 2), False),  # two images, dilation, asymmetric everything
    (1, 40, 7, 7, 129, 1, 1, 1, 0, 1, True),  # 49 pixels, K not a multiple of mr
    (1, 64, 14, 14, 300, 1, 1, 2, 0, 1, False),  # strided 1x1
    (1, 3, 17, 17, 50, 7, 7, 2, 3, 1, True),  # a stem-like filter over 3 channels
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", SMALL, ids=lambda c: "x".join(map(str, c[:7])) + f"-st{c[7]}-d{c[9]}")
def test_small_m_form_matches_the_reference(family, threads, case):
    import dataclasses

    op = _direct_op(case)
    v = cpu.resolve(f"{family}.conv2d")
    if v.unmet(HOST, "fp32"):
        pytest.skip(f"{v.id} cannot run here")
    s = dataclasses.replace(cpu.hero_schedule(op, v, HOST), pack_a=True, pack_b=False,
                            threads=min(threads, HOST.cpu.logical_cores or 1))
    verify_on_fresh_inputs(cpu.build(op, v, s, HOST), op, s.name)


def test_heuristic_picks_a_form_per_shape():
    """The filter in place where it outweighs the pixels 16 to 1; the input in place (direct) for 1x1 and
    stride-1 filters, strided ones off AMD hosts (their patches copied once), few channels, or fewer pixels than
    channels, unless a 1x1 stride-1 conv's pixels lie a multiple of 4 KiB apart on an AMD host; the packed path
    otherwise; both operands in place (the direct small-channel form)
    below 16 input channels only."""
    import dataclasses

    from tracea.doctor.errors import BadInputError

    v = cpu.resolve("cpu-portable.conv2d")

    def conv(c, hw, k, r, stride):
        return Conv2d(1, c, hw, hw, k, r, r, stride=stride, padding=r // 2, layout="nhwc", dtype="fp32")

    from tracea.doctor.snapshot import read_snapshot

    snaps = Path(__file__).parents[2] / "fixtures" / "snapshots"
    amd, xeon = (read_snapshot(snaps / f"{n}.json")[0] for n in ("ci_vm", "h100_live"))
    assert amd.cpu.vendor == "AuthenticAMD" and xeon.cpu.vendor == "GenuineIntel"
    cases = {conv(1024, 14, 2048, 1, 2): (True, False), conv(64, 14, 512, 3, 1): (False, True),
             conv(512, 14, 512, 3, 2): (False, True), conv(3, 64, 64, 7, 2): (False, False),  # the stem form
             conv(1040, 14, 512, 1, 1): (False, True), conv(512, 28, 256, 1, 1): (False, True),
             conv(512, 28, 1024, 1, 2): (False, True)}
    # 1x1 stride 1 over pixels 4 KiB apart (1024, 2048 fp32 channels): the packed path on an AMD host, the direct
    # one on an Intel one; 1040 apart, 2 KiB apart, or stride 2: the direct one on both
    # a strided 3x3 with more pixels than channels: the patches copied once, read in place, but on AMD (not measured
    # there: the packed path stays)
    aliased = (conv(1024, 14, 512, 1, 1), conv(2048, 7, 512, 1, 1), conv(64, 56, 64, 3, 2))
    for host, pitch in ((amd, (True, True)), (xeon, (False, True))):
        want = {**cases, **{op: pitch for op in aliased}}
        assert {op: (s.pack_a, s.pack_b) for op in want for s in [cpu.hero_schedule(op, v, host)]} == want
    small = conv(1024, 14, 2048, 1, 2)
    space = cpu.search_space(small, v, HOST)
    assert (space[0].pack_a, space[0].pack_b) == (True, False) and any(not s.pack_a for s in space)
    direct = conv(64, 14, 512, 3, 1)
    with pytest.raises(BadInputError, match="only in the direct small-channel form, and it reads runs"):
        cpu.build(direct, v, dataclasses.replace(cpu.hero_schedule(direct, v, HOST), pack_b=False), HOST)
    with pytest.raises(BadInputError, match="^pack_b:"):
        fp16 = dataclasses.replace(small, dtype=cpu_dtype("fp16"))
        cpu.build(fp16, v, cpu.hero_schedule(small, v, HOST), HOST)


def cpu_dtype(name):
    from tracea.kernels.dtypes import parse_dtype

    return parse_dtype(name)
