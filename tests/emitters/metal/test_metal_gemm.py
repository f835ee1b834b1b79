"""The Metal simdgroup-matrix GEMM (emitters/metal/gemm.py, cores/gemm.py, tg_banks.py): its schedule, hero,
search space and launch; the rendered MSL is real Metal in the subset compat.py models; the kernel, run by the
CPU simulator (emitters/metal/simulate.py: the rendered source compiled as C++ against the compatibility
header), matches the float64 reference within the op's tolerance on odd shapes, both layouts of each side,
each epilogue op in orders where a wrong order shows, fp32/fp16/bf16 and a sample of the search space; the
threadgroup-memory layout under the assumed Apple bank model."""

from __future__ import annotations

import dataclasses
import random
import re
from types import SimpleNamespace

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters.metal import gemm as g
from tracea.emitters.metal import tg_banks as tb
from tracea.emitters.metal.core import KERNEL_BUILTINS, THREADGROUP_MEMORY
from tracea.emitters.metal.cores import core_for
from tracea.kernels import Conv2d, DType, Gemm
from tracea.kernels.dtypes import to_float64
from tracea.kernels.op import relative_error, tolerance

DTYPES = ("fp32", "fp16", "bf16")
CORE = core_for(Gemm(8, 8, 8))


def plausible_msl(src: str, launch) -> None:
    """What Apple's compiler would take and the subset allows: one kernel whose ``[[buffer(i)]]`` arguments
    follow the launch's order, then the five built-ins; threadgroup arrays at the top of the body within
    32 KiB; none of CUDA's or C++'s spellings that MSL lacks, no half literals."""
    assert src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    for bad in ("__device__", "__global__", "__shared__", "__syncthreads", "std::", "printf", "long long", "size_t",
                "#pragma", "[&]", "auto ", "nullptr", "tanhf", "__restrict__", "atomic", "goto"):
        assert bad not in src, bad
    assert not re.search(r"\b\d+(\.\d*)?h\b", src), "a half literal"
    start = src.index("kernel void")
    head = src[start:src.index(") {", start)]
    buffers = re.findall(r"\[\[buffer\((\d+)\)\]\]", head)
    assert buffers == [str(i) for i in range(len(launch.args))]
    params = [p.strip() for p in head[head.index("(") + 1:].split(",")]
    for (kind, _), arg in zip(launch.args, params, strict=False):
        want = {"in": "device const ", "out": "device ", "i32": "constant int& ", "f32": "constant float& "}[kind]
        assert arg.startswith(want), (kind, arg)
    assert tuple(params[len(launch.args):]) == KERNEL_BUILTINS
    body = src[start + len(head) + 3:]
    arrays = re.findall(r"threadgroup (float|half|ushort) \w+\[(\d+)\];", body)
    sizes = {"float": 4, "half": 2, "ushort": 2}
    assert sum(sizes[t] * int(n) for t, n in arrays) == launch.threadgroup_bytes <= THREADGROUP_MEMORY
    first_statement = [ln.strip() for ln in body.splitlines() if ln.strip()][: len(arrays)]
    assert all(ln.startswith("threadgroup ") for ln in first_statement)  # declared at the top of the body only
    assert launch.block[0] % 32 == 0 and launch.threads <= 1024


# ----------------------------------------------------------------------------------------- schedule and core

def test_the_schedule_reads_back_and_refuses_other_documents():
    s = g.MetalGemmSchedule(128, 32, 32, 4, 1, 4)
    assert g.MetalGemmSchedule.from_json(s.to_json()) == s and s.to_json()["kind"] == "metal-gemm"
    assert s.to_json()["backend"] == "metal"  # as every Metal schedule's document
    with pytest.raises(BadInputError):
        g.MetalGemmSchedule.from_json({**s.to_json(), "backend": "hip"})
    for bad in ({"kind": "hip-mfma", "bm": 64}, {"kind": "metal-gemm", "tile": 3}, {"kind": "metal-gemm", "bm": True},
                [1, 2]):
        with pytest.raises(BadInputError):
            g.MetalGemmSchedule.from_json(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("fields,message", [
    (dict(bm=48, wm=4), "whole 8x8 fragments"), (dict(bk=12), "multiple of 8"), (dict(pad=3), "even number"),
    (dict(bm=128, bn=128, wm=1, wn=1), "accumulators a simdgroup"), (dict(bm=0), "bm: expected a positive"),
    (dict(bm=128, bn=128, bk=64, wm=4, wn=4), "threadgroup memory"),
])
def test_a_bad_schedule_is_one_clear_error(fields, message):
    with pytest.raises(BadInputError, match=re.escape(message)):
        g.render("fp32", g.MetalGemmSchedule(**fields))


def test_what_the_core_refuses_is_one_line():
    with pytest.raises(UnsupportedError, match="fp32, fp16, bf16"):
        CORE.check_op(SimpleNamespace(kind="gemm", dtype=DType.INT8, m=8, n=8, k=8))  # a Gemm takes no int8
    with pytest.raises(UnsupportedError, match="2\\^32"):
        core_for(Gemm(1 << 17, 1 << 16, 8))
    with pytest.raises(UnsupportedError, match="m = 2147483600: the Metal kernels take GEMM extents up to"):
        core_for(Gemm(2_147_483_600, 1, 1))  # a tile past the edge would overflow its int rows


def test_the_hero_fills_the_gpu_before_it_grows_the_tile():
    big = Gemm(4096, 4096, 4096, dtype="fp16")
    assert CORE.hero(big, 40) == g.MetalGemmSchedule(64, 64, 16, 2, 2, 8)  # MLX's known-good point
    for m, n, cores in ((256, 128, 16), (100, 70, 16), (4, 4096, 40), (64, 64, None)):
        op = Gemm(m, n, 64)
        hero = CORE.hero(op, cores)
        tiles = -(-m // hero.bm) * -(-n // hero.bn)
        best = max(-(-m // bm) * -(-n // bn) for bm, bn, _, _ in g.HERO_TILES)
        assert tiles >= (cores or g.DEFAULT_GPU_CORES) or tiles == best, (m, n, hero)
        hero.validate(op)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_space_holds_only_schedules_that_build_the_hero_first(dtype):
    op = Gemm(300, 200, 100, dtype=dtype)
    hero = CORE.hero(op, 16)
    space = CORE.space(op, hero)
    assert space[0] == hero and len(set(space)) == len(space) > 300
    for s in space:
        s.validate(op)
        assert s.threads <= 1024 and s.threadgroup_bytes(dtype) <= THREADGROUP_MEMORY
        assert {s.bm, s.bn} <= {32, 64, 128} and s.bk in (8, 16, 32)
    assert {(s.wm, s.wn) for s in space} == {(a, b) for a in (1, 2, 4) for b in (1, 2, 4)}


def test_the_launch_passes_only_the_operands_the_chain_reads():
    plain = CORE.render(Gemm(70, 50, 30), CORE.hero(Gemm(70, 50, 30), 8))
    assert plain.args == (("in", "a"), ("in", "b"), ("out", None), ("i32", 70), ("i32", 50), ("i32", 30))
    assert "bias" not in plain.source and "residual" not in plain.source and "alpha" not in plain.source
    op = Gemm(70, 50, 30, dtype="bf16", epilogue=("residual", "scale", "bias"), alpha=0.25)
    ln = CORE.render(op, CORE.hero(op, 8))
    assert ln.args == (("in", "a"), ("in", "b"), ("in", "bias"), ("in", "residual"), ("out", None), ("i32", 70),
                       ("i32", 50), ("i32", 30), ("f32", 0.25))
    assert ln.grid == (-(-50 // ln_bn(ln)), -(-70 // ln_bm(ln)), 1)


def ln_bm(ln) -> int:
    return int(re.search(r"m0 = int\(tgid.y\) \* (\d+)", ln.source).group(1))


def ln_bn(ln) -> int:
    return int(re.search(r"n0 = int\(tgid.x\) \* (\d+)", ln.source).group(1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_rendered_form_is_plausible_msl(dtype):
    op = Gemm(33, 65, 17, dtype=dtype, layout_a="col", layout_b="col", epilogue=("bias", "gelu", "relu", "scale", "residual"))
    for s in sample(CORE.space(op, CORE.hero(op, 10)), 12, seed=1):
        ln = CORE.render(op, s)
        plausible_msl(ln.source, ln)
        frag = "simdgroup_half8x8" if dtype == "fp16" else "simdgroup_float8x8"
        assert f"{frag} fa[" in ln.source and ln.source.count("simdgroup_multiply_accumulate(") == 1
        assert ("tr_f2bf" in ln.source) == (dtype == "bf16")


# ------------------------------------------------------------------------------------ the bank model's layout

@pytest.mark.parametrize("dtype", DTYPES)
def test_the_hero_pads_make_the_fragment_loads_conflict_free(dtype):
    for bm, bn, wm, wn in g.HERO_TILES:
        for bk in (16, 32):
            s = g.MetalGemmSchedule(bm, bn, bk, wm, wn, g.HERO_PAD)
            report = tb.tg_report(s, dtype)
            assert report["A fragment load"]["conflicts"] == report["B fragment load"]["conflicts"] == 0, s
            assert report["A fragment load"]["bytes"] == 2 * g.staged_bytes(dtype)  # a lane's element pair
            assert g.HERO_PAD in tb.conflict_free_pads(s, dtype=dtype)
        # unpadded rows of 16 or 64 elements put a fragment's rows on the same banks
        assert tb.tg_report(dataclasses.replace(s, bk=16, pad=0), dtype)["A fragment load"]["conflicts"] > 0


def test_the_hero_staging_stores_under_the_model():
    """Row-major operands stage with consecutive lanes on consecutive elements: B's rows of 64 + 8 never
    conflict, A's rows of 16 + 8 only in 4-byte elements (two rows of a simdgroup's 32 lanes overlap 8 banks);
    a column-major A goes down the rows, 4 to 8 ways (the layout is chosen for the fragment loads)."""
    s = g.MetalGemmSchedule()
    for dtype in DTYPES:
        report = tb.tg_report(s, dtype)
        assert report["B staging store"]["conflicts"] == 0
        assert report["A staging store"]["conflict_degree"] == (1 if dtype == "fp16" else 2)
        assert tb.tg_report(s, dtype, a_down=True)["A staging store"]["conflict_degree"] == (4 if dtype == "fp16" else 8)


@pytest.mark.parametrize("op", [Gemm(40, 40, 40, layout_a="col"), Gemm(40, 40, 40, layout_b="col"),
                                Conv2d(1, 4, 6, 6, 8, 3, 3, layout="nhwc")], ids=lambda op: op.case_label())
def test_the_scored_walks_are_the_rendered_ones(op):
    """tg_banks.staging_walks says which way each operand's staging goes; the kernel's text agrees."""
    core = core_for(op)
    s = g.MetalGemmSchedule(64, 32, 16, 2, 1, 8)
    src = core.render(op, s).source
    a_down, b_down = tb.staging_walks(op)
    assert (f"const int r = f % {s.bm}, c = f / {s.bm};" in src) == a_down
    assert (f"const int r = f / {s.bk}, c = f % {s.bk};" in src) == (not a_down)
    assert (f"const int r = f % {s.bk}, c = f / {s.bk};" in src) == b_down
    assert (f"const int r = f / {s.bn}, c = f % {s.bn};" in src) == (not b_down)
    assert "fr = (q & 4) + (int(lane) / 2) % 4, fc = (q & 2) * 2 + (int(lane) % 2) * 2;" in src  # fragment_place's


def test_the_fragment_placement_covers_the_8x8_tile_once():
    row, col = tb.fragment_place(np.arange(32))
    cells = {(int(r), int(c) + e) for r, c in zip(row, col, strict=True) for e in (0, 1)}
    assert cells == {(r, c) for r in range(8) for c in range(8)}
    assert (row[:4].tolist(), col[:4].tolist()) == ([0, 0, 1, 1], [0, 2, 0, 2])  # MLX's quad 0


def test_the_tuner_drops_a_conflicting_pad_only_where_another_pad_is_clean():
    op = Gemm(512, 512, 512, dtype="fp16")
    assert tb.bank_conflict_drop(op, "metal-simdgroup.gemm", g.MetalGemmSchedule(pad=8)) is None
    reason = tb.bank_conflict_drop(op, "metal-simdgroup.gemm", g.MetalGemmSchedule(pad=0))
    assert reason and "pad 8 has none" in reason
    bk8 = g.MetalGemmSchedule(bk=8, pad=0)  # bk 8 has no clean pad among PADS (A's rows and B's differ): kept
    assert tb.conflict_free_pads(bk8, dtype="fp16") == [] and tb.bank_conflict_drop(op, None, bk8) is None
    assert tb.staging_walks(Gemm(8, 8, 8, layout_a="col")) == (True, False)


# ---------------------------------------------------------------------------------------- run on the CPU

def sample(space: list, count: int, seed: int) -> list:
    """A deterministic sample of a search space, its first (the hero) included."""
    rest = space[1:]
    return [space[0], *random.Random(seed).sample(rest, min(count - 1, len(rest)))]


@pytest.fixture(scope="module")
def simulate():
    from tracea.emitters.metal import simulate as module  # a failing import fails these tests, not skips them

    return module


def run_gemm(simulate, op: Gemm, schedule: g.MetalGemmSchedule | None = None, seed: int = 0) -> float:
    """The op's relative error on fresh inputs (C pre-filled with NaN), asserted within its tolerance."""
    schedule = schedule or CORE.hero(op, 10)
    ln = CORE.render(op, schedule)
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), np.nan, dtype=np.float32).astype(op.dtype.storage) if op.dtype.value != "bf16" \
        else np.full(op.output_shape(), 0x7FC0, dtype=np.uint16)  # bf16's NaN
    simulate.run(ln, inputs, out)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), f"{op.case_label()} {schedule.name}: relative error {err:.3g}"
    return err


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layouts", [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")])
def test_odd_shapes_in_every_layout(simulate, dtype, layouts):
    op = Gemm(37, 45, 29, dtype=dtype, layout_a=layouts[0], layout_b=layouts[1])
    run_gemm(simulate, op, g.MetalGemmSchedule(32, 32, 16, 2, 2, 8))


@pytest.mark.parametrize("m,n,k", [(1, 45, 29), (37, 1, 5), (1, 1, 1), (9, 130, 3)])
def test_degenerate_shapes_with_the_hero(simulate, m, n, k):
    """A row, a column, one element, K below one 8-wide step: every tile but one element empty."""
    op = Gemm(m, n, k, dtype="fp16", epilogue=("bias",))
    run_gemm(simulate, op, CORE.hero(op, 10), seed=m + n + k)


ORDERS = [("bias", "relu"), ("relu", "bias"), ("scale", "residual"), ("residual", "scale"), ("gelu", "scale"),
          ("bias", "gelu", "scale", "residual"), ("residual", "relu", "scale", "bias")]


@pytest.mark.parametrize("chain", ORDERS, ids=",".join)
def test_the_epilogue_in_order(simulate, chain):
    op = Gemm(21, 19, 24, dtype="fp32", epilogue=chain, alpha=-1.5)
    run_gemm(simulate, op, g.MetalGemmSchedule(32, 32, 8, 1, 2, 8), seed=3)
    # the test can fail: the chain in another order is far off the reference
    inputs = op.random_inputs(np.random.default_rng(3))
    swapped = dataclasses.replace(op, epilogue=tuple(reversed(chain)))
    assert relative_error(swapped.reference(inputs), op.reference(inputs)) > 10 * tolerance(op)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_whole_chain_in_16_bits(simulate, dtype):
    op = Gemm(40, 24, 40, dtype=dtype, layout_a="col", epilogue=("bias", "gelu", "scale", "residual"), alpha=0.5)
    run_gemm(simulate, op, g.MetalGemmSchedule(32, 32, 32, 2, 1, 4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_sample_of_the_search_space_each_tile_once(simulate, dtype):
    """Each tile shape (bm x bn) of the space once per dtype, its simdgroups, bk and pad drawn from the space
    (a fixed seed): every rendered form of the sample, on a problem that leaves a partial tile each way and
    a partial k tile."""
    op0 = Gemm(64, 64, 64, dtype=dtype)
    space = CORE.space(op0, CORE.hero(op0, 10))
    rng = random.Random(7)
    for bm in g.SPACE_TILES:
        for bn in g.SPACE_TILES:
            s = rng.choice([t for t in space if (t.bm, t.bn) == (bm, bn)])
            run_gemm(simulate, Gemm(bm + 9, bn + 5, 2 * s.bk + 3, dtype=dtype, layout_b="col"), s)
