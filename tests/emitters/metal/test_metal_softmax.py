"""The Metal row softmax (emitters/metal/softmax.py, cores/softmax.py): its schedule's JSON and checks, the
launch its core renders, and the rendered MSL run through the CPU simulator (emitters/metal/simulate.py) on
fresh random inputs against the op's float64 reference: every dtype, 1 x 1 up to rows of 5000 columns, -inf
entries and a row of -inf throughout, and each distinct form of a sample of the search space."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters.metal import simulate
from tracea.emitters.metal import softmax as sm
from tracea.emitters.metal.core import KERNEL_BUILTINS, THREADGROUP_MEMORY
from tracea.emitters.metal.cores import CORES, core_for
from tracea.kernels import Softmax
from tracea.kernels.dtypes import DType, to_float64, to_storage
from tracea.kernels.op import relative_error, tolerance

CORE = CORES["softmax"]
NAN_BITS = {"fp32": np.float32(np.nan), "fp16": np.float16(np.nan), "bf16": np.uint16(0x7FC0)}


def subset_problems(launch) -> list[str]:
    """What in a launch breaks the MSL subset's rules that a look at the text can find."""
    src, out = launch.source, []
    if re.search(r"\b\d+(\.\d*)?h\b", src):
        out.append("a half literal with an h suffix")
    body = src[src.index("{", src.index(f"kernel void {launch.name}")) + 1:]
    decls = re.findall(r"^    threadgroup (float|half|ushort|uint|int) (\w+)\[(\d+)\];$", body, re.M)
    lines = [ln for ln in body.splitlines() if ln.strip()]
    if any("threadgroup " in ln and "barrier" not in ln for ln in lines[len(decls):]):
        out.append("a threadgroup declaration past the top of the body")
    size = {"float": 4, "uint": 4, "int": 4, "half": 2, "ushort": 2}
    if sum(size[t] * int(n) for t, _, n in decls) != launch.threadgroup_bytes:
        out.append(f"threadgroup arrays {decls} are not the launch's {launch.threadgroup_bytes} B")
    if launch.threadgroup_bytes > THREADGROUP_MEMORY or launch.threads % 32 or launch.threads > 1024:
        out.append("over Metal's threadgroup limits")
    if ",\n        ".join(KERNEL_BUILTINS) not in src:
        out.append("the built-in arguments are not the five, in order")
    n_buffers = len(re.findall(r"\[\[buffer\(\d+\)\]\]", src))
    if n_buffers != len(launch.args) or f"[[buffer({n_buffers - 1})]]" not in src:
        out.append(f"{n_buffers} buffer arguments for {len(launch.args)} launch arguments")
    return out


# ---------------------------------------------------------------------------------------------- schedule

def test_the_schedule_reads_back_from_its_json_and_refuses_others():
    s = sm.MetalSoftmaxSchedule(rows=2, simdgroups=8)
    assert s.to_json() == {"backend": "metal", "kind": "metal-softmax", "rows": 2, "simdgroups": 8}
    assert sm.MetalSoftmaxSchedule.from_json(s.to_json()) == s
    for bad, word in (({**s.to_json(), "kind": "metal-attention"}, "kind"), ({**s.to_json(), "tile": 3}, "tile"),
                      ({**s.to_json(), "backend": "hip"}, "backend"),
                      ({"kind": "metal-softmax", "rows": 2}, "simdgroups"),
                      ({**s.to_json(), "rows": 3}, "power of two"), ({**s.to_json(), "simdgroups": 64}, "1024"),
                      ({**s.to_json(), "rows": True}, "rows")):
        with pytest.raises(BadInputError, match=word):
            sm.MetalSoftmaxSchedule.from_json(bad)


def test_the_core_refuses_what_the_kernel_does_not_compute():
    with pytest.raises(UnsupportedError, match="fp32, fp16 or bf16"):  # the op takes no other today
        sm.check_softmax(SimpleNamespace(dtype=DType.INT8, rows=4, cols=8))
    with pytest.raises(UnsupportedError, match="32-bit offsets"):
        core_for(Softmax(rows=1 << 16, cols=1 << 16))
    with pytest.raises(UnsupportedError, match="rows and columns as 32-bit ints"):
        sm.check_softmax(SimpleNamespace(dtype=DType.FP32, rows=1, cols=3_000_000_000))
    assert core_for(Softmax(rows=4, cols=8)) is CORE


def test_the_hero_takes_a_simdgroup_for_a_short_row_and_several_for_a_long_one():
    assert CORE.hero(Softmax(rows=4096, cols=1000), 10) == sm.MetalSoftmaxSchedule(rows=4, simdgroups=1)
    assert CORE.hero(Softmax(rows=8, cols=1000), 10) == sm.MetalSoftmaxSchedule(rows=1, simdgroups=1)
    assert CORE.hero(Softmax(rows=16, cols=32000), 10) == sm.MetalSoftmaxSchedule(rows=1, simdgroups=16)
    assert CORE.hero(Softmax(rows=16, cols=5000), 10) == sm.MetalSoftmaxSchedule(rows=1, simdgroups=4)


def test_the_space_is_every_form_within_1024_threads_the_hero_first():
    op = Softmax(rows=64, cols=3000)
    hero = CORE.hero(op, 8)
    space = CORE.space(op, hero)
    assert space[0] == hero and len(set(space)) == len(space) == 18
    for s in space:
        s.validate(op)
        assert s.threads <= 1024


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_every_form_of_the_space_renders_in_the_subset(dtype):
    op = Softmax(rows=5, cols=300, dtype=dtype)
    sources = set()
    for s in CORE.space(op, CORE.hero(op, 8)):
        launch = CORE.render(op, s)
        assert subset_problems(launch) == [], s.name
        assert launch.args == (("in", "x"), ("out", None), ("i32", 5), ("i32", 300))
        assert launch.grid == (-(-5 // s.rows), 1, 1) and launch.block == (s.threads, 1, 1)
        assert f"device const {sm.STORE[dtype]}* x" in launch.source
        sources.add(launch.source)
    assert len(sources) == 18  # each schedule its own kernel


# ---------------------------------------------------------------------------------------- run on the CPU

def nan_output(op: Softmax) -> np.ndarray:
    return np.full(op.output_shape(), NAN_BITS[op.dtype.value])


def element_bound(op: Softmax, ref: np.ndarray) -> np.ndarray:
    """What each element may be off the float64 reference: its rounding to the output type (half an ulp)
    beside fp32 arithmetic (a relative 1e-5), and below fp16's normals half its subnormal step."""
    u = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8}[op.dtype.value]
    return (u + 1e-5) * np.abs(ref) + (2.0**-25 if op.dtype is DType.FP16 else 1e-30)


def run_softmax(op: Softmax, schedule: sm.MetalSoftmaxSchedule, x: np.ndarray | None = None,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(output, reference) in float64 for ``x`` (default: the op's random inputs), the output pre-filled with
    NaN; the rows the reference makes finite checked element by element and within the op's tolerance."""
    x = op.random_inputs(np.random.default_rng(seed))["x"] if x is None else x
    out = nan_output(op)
    simulate.run(CORE.render(op, schedule), {"x": x}, out)
    with np.errstate(invalid="ignore"):  # the reference's NaN rows
        got, ref = to_float64(out, op.dtype), op.reference({"x": x})
    rows = np.isfinite(ref).all(axis=1)
    label = f"{op.case_label()} {schedule.name}"
    bad = np.abs(got[rows] - ref[rows]) > element_bound(op, ref[rows])
    assert not bad.any(), f"{label}: {int(bad.sum())} elements off, first at {np.argwhere(bad)[0]}"
    err = relative_error(got[rows], ref[rows])
    assert err <= tolerance(op), f"{label}: relative error {err:.3g}"
    return got, ref


SHAPES = [(1, 1), (5, 33), (3, 5000)]


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
def test_the_hero_matches_the_reference(dtype, shape):
    op = Softmax(rows=shape[0], cols=shape[1], dtype=dtype)
    run_softmax(op, CORE.hero(op, 8), seed=sum(shape))


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_minus_inf_gives_zero_and_a_row_of_it_nan_as_the_reference(dtype):
    """Some entries -inf, a row -inf throughout (the reference's NaN row), a row with one finite entry (1
    there, 0 elsewhere); on a form whose rows span simdgroups and share threadgroups, and on a simdgroup a row."""
    op = Softmax(rows=6, cols=300, dtype=dtype)
    values = np.random.default_rng(5).standard_normal((6, 300)).astype(np.float32) * 4 + 40
    values[np.random.default_rng(6).random((6, 300)) < 0.3] = -np.inf
    values[2] = -np.inf
    values[4] = -np.inf
    values[4, 123] = 7.0
    x = to_storage(values, op.dtype)
    for schedule in (sm.MetalSoftmaxSchedule(rows=2, simdgroups=4), sm.MetalSoftmaxSchedule(rows=4, simdgroups=1)):
        got, ref = run_softmax(op, schedule, x)
        assert np.isnan(ref[2]).all() and np.isnan(got[2]).all()
        assert np.isfinite(np.delete(got, 2, axis=0)).all()
        masked = np.isneginf(values)
        masked[2] = False
        assert (got[masked] == 0).all()
        assert got[4, 123] == 1.0 and np.count_nonzero(got[4]) == 1


def test_a_sample_of_the_search_space_each_form_once():
    """Seven forms of the space (a fixed seed, the hero first), the dtypes taken in turn, on rows that fill
    no lane's last stride and no threadgroup's last rows."""
    op0 = Softmax(rows=11, cols=1100)
    space = CORE.space(op0, CORE.hero(op0, 8))
    forms = [space[0], *random.Random(3).sample(space[1:], 6)]
    dtypes = ("fp32", "fp16", "bf16")
    seen = set()
    for i, s in enumerate(forms):
        op = Softmax(rows=11, cols=1100, dtype=dtypes[i % 3])
        seen.add(CORE.render(op, s).source)
        run_softmax(op, s, seed=i)
    assert len(seen) == len(forms)
