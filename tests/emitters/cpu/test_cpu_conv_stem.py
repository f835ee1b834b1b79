"""The CPU conv's direct small-channel form (emitters/cpu/conv_stem.py): the heuristic's choice below 16 input
channels, its tile per vector family, its refusals, and the kernel against the float64 reference on every
family this machine runs (strides, padding, K tails, bias, batches, one and two threads, called twice so the
reused buffers' stale contents must not leak in)."""

from __future__ import annotations

import dataclasses

import pytest
from fp32_checks import verify_on_fresh_inputs  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.emitters.cpu import conv_stem
from tracea.kernels import Conv2d

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")

pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled

CASES = [
    # n, c, h, w, k, r, s, stride, padding, bias
    (1, 3, 32, 30, 64, 7, 7, 2, 3, False),  # a small stem
    (2, 3, 23, 21, 16, 7, 7, 2, 3, True),
    (1, 5, 17, 19, 40, 3, 3, 1, 1, True),  # K tail inside a vector block
    (3, 1, 12, 9, 100, 5, 3, (2, 1), (2, 0), False),  # several channel blocks, asymmetric stride and padding
    (1, 15, 8, 8, 7, 1, 1, 1, 0, True),  # the widest input, a 1x1 filter, fewer channels than a vector
    (1, 4, 9, 40, 33, 4, 6, 3, (0, 5), False),  # stride 3, an even filter, padding on one axis only
    (1, 3, 11, 13, 16, 1, 1, 2, 0, False),  # a 1x1 filter at stride 2: the stride past the filter
    (1, 2, 10, 11, 8, 2, 2, 3, 1, True),  # a 2x2 filter at stride 3
    (1, 2, 5, 5, 8, 5, 5, 1, 4, True),  # padding past the filter's reach: whole zero rows
]


def _op(case):
    n, c, h, w, k, r, s, stride, padding, bias = case
    return Conv2d(n, c, h, w, k, r, s, stride=stride, padding=padding, layout="nhwc", bias=bias, dtype="fp32")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])))
def test_stem_form_matches_the_reference(family, threads, case):
    op = _op(case)
    v = cpu.resolve(f"{family}.conv2d")
    if v.unmet(HOST, "fp32"):
        pytest.skip(f"{v.id} cannot run here")
    hero = cpu.hero_schedule(op, v, HOST)
    assert (hero.pack_a, hero.pack_b) == (False, False)
    assert (hero.mr, hero.nr) == conv_stem.tile(family, op.k)
    s = dataclasses.replace(hero, threads=min(threads, HOST.cpu.logical_cores or 1))
    verify_on_fresh_inputs(cpu.build(op, v, s, HOST), op, s.name)


@pytest.mark.parametrize("kwargs, why", [
    (dict(c=16), "C <= 15"),
    (dict(dilation=2), "undilated"),
    (dict(layout="nchw"), "NHWC"),
    (dict(dtype="bf16"), "fp32"),
    (dict(groups=3, c=6, k=6), "groups = 1"),
])
def test_stem_form_refuses_what_it_cannot_compute(kwargs, why):
    base = dict(n=1, c=3, h=20, w=20, k=16, r=3, s=3, padding=1, layout="nhwc", dtype="fp32")
    op = Conv2d(**(base | kwargs))
    assert why in conv_stem.refusal(op)
    v = cpu.resolve("cpu-portable.conv2d")
    hero = cpu.hero_schedule(op, v, HOST)
    assert hero.pack_a or hero.pack_b  # another form is the hero
    with pytest.raises(BadInputError, match="^pack_a: "):  # this form's reason, or the schedule's own check's
        cpu.build(op, v, dataclasses.replace(hero, pack_a=False, pack_b=False), HOST)


def test_tiles_fill_the_registers_with_useful_channels():
    from tracea.emitters.cpu.schedule import FAMILY_REGISTERS

    assert conv_stem.tile("cpu-avx512", 64) == (6, 64)  # the stem: 24 accumulators, 4 filter vectors
    assert conv_stem.tile("cpu-avx2-fma", 64) == (6, 16)  # not 4 x 24, a third of whose last block is empty
    for family, (lanes, vregs) in FAMILY_REGISTERS.items():
        for k in (1, 7, 16, 40, 64, 100, 1000):
            mr, nr = conv_stem.tile(family, k)
            assert nr % lanes == 0 and 1 <= mr <= conv_stem.MAX_MR and nr <= 64
            assert mr * (nr // lanes) + nr // lanes + 1 <= vregs


def test_the_space_holds_the_form_first_and_the_others():
    op = _op(CASES[0])
    v = cpu.resolve("cpu-portable.conv2d")
    space = cpu.search_space(op, v, HOST)
    assert space[0] == cpu.hero_schedule(op, v, HOST) and (space[0].pack_a, space[0].pack_b) == (False, False)
    assert {(s.pack_a, s.pack_b) for s in space} >= {(False, False), (False, True), (True, True)}
    assert len(space) == len(set(space))
