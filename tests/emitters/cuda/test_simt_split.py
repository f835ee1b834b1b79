"""The SIMT GEMM's K split and small tiles without a GPU: the split's index math against a NumPy model, the
schedule field (JSON, name, checks), the heuristic's choices, the search space, and NVRTC compiles for
sm_80 and sm_90a without spills."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters import cuda
from tracea.emitters.cuda import simt, simt_gemv, simt_split
from tracea.emitters.cuda.schedule import CudaSchedule
from tracea.kernels import Conv2d, Gemm

VID = "cuda-simt.gemm"
BIG = CudaSchedule("simt", bm=128, bn=128, bk=16, wm=32, wn=64, stages=2, raster=8)


class NoGpu:
    nvidia = None


def _c_part(part: int, kt_all: int, split: int) -> tuple[int, int]:
    """The kernel's (kt0, ktiles), its C expressions evaluated with C's truncating int64 division."""
    kt0 = int(np.int64(part) * kt_all // split)
    return kt0, int(np.int64(part + 1) * kt_all // split) - kt0


@pytest.mark.parametrize("kt_all,split", [(63, 2), (63, 4), (5, 4), (5, 5), (257, 12), (512, 16), (1, 1), (7, 3)])
def test_split_parts_cover_k_once_and_evenly(kt_all, split):
    parts = simt_split.split_index(kt_all, split)
    assert parts == [_c_part(p, kt_all, split) for p in range(split)]
    covered = np.concatenate([np.arange(kt0, kt0 + n) for kt0, n in parts])
    assert np.array_equal(covered, np.arange(kt_all))  # in order, each k tile once
    sizes = [n for _, n in parts]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= (1 if split <= kt_all else 0)


@pytest.mark.parametrize("m,n,k,bk,split", [(37, 70, 4097, 16, 12), (257, 129, 65, 16, 5), (9, 5, 33, 8, 3)])
def test_the_split_sums_to_the_product_in_a_fixed_order(m, n, k, bk, split):
    """The parts' partial products (each k tile's rows of A and B, zero past K as the loaders guard) summed
    0, 1, .., split - 1 give the product, and the same bits whichever part arrives last."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    parts = []
    for kt0, nt in simt_split.split_index(-(-k // bk), split):
        lo, hi = min(k, kt0 * bk), min(k, (kt0 + nt) * bk)
        parts.append(a[:, lo:hi] @ b[lo:hi, :])
    total = np.zeros((m, n), np.float32)
    for p in parts:  # the last block's loop: its own part from registers, the others from the workspace
        total = total + p
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(total - ref).max() <= 1e-4 * np.abs(ref).max() * np.sqrt(k)
    for last in range(split):  # whichever block is last reads the same values in the same order
        again = np.zeros((m, n), np.float32)
        for p in range(split):
            again = again + (parts[last] if p == last else parts[p])
        assert np.array_equal(again.view(np.uint32), total.view(np.uint32))


def test_workspace_slots_are_disjoint_and_inside_the_workspace():
    """float4 slot ``(p * 16 + j) * threads + t`` of tile ``pid``'s slab: every (tile, part, chunk, thread)
    once, inside the partial region the host allocates."""
    s = dataclasses.replace(BIG, bm=64, bn=128, split_k=3)
    op = Gemm(200, 300, 1001)
    tiles, nt = simt._tiles(op, s), s.block_threads
    pid, p, j, t = np.meshgrid(np.arange(tiles), np.arange(3), np.arange(16), np.arange(nt), indexing="ij")
    slot = pid * (3 * 16 * nt) + (p * 16 + j) * nt + t
    assert len(np.unique(slot)) == slot.size
    words = simt_split._counter_words(tiles)
    assert 4 * words + 16 * (slot.max() + 1) == simt_split.workspace_bytes(tiles, s) and words >= tiles


def test_split_k_field_json_name_and_checks():
    s = dataclasses.replace(BIG, split_k=4)
    assert "split_k" not in BIG.to_json() and "_k" not in BIG.name
    assert s.to_json()["split_k"] == 4 and s.name.endswith("_k4")
    assert CudaSchedule.from_json(s.to_json()) == s
    op = Gemm(1000, 999, 1001)
    s.validate(op)
    for bad, what in [(dataclasses.replace(s, split_k=0), "split_k"),
                      (dataclasses.replace(s, split_k=64), "split_k"),
                      (dataclasses.replace(s, core="mma", bk=32, wm=64, wn=64), "split_k")]:
        with pytest.raises(BadInputError, match=what):
            bad.validate(op)
    dataclasses.replace(s, split_k=7).validate(Gemm(100, 100, 100))  # 7 k tiles of 16
    with pytest.raises(BadInputError, match="k tiles"):
        dataclasses.replace(s, split_k=8).validate(Gemm(100, 100, 100))
    with pytest.raises(BadInputError, match="gemm only"):
        s.validate(Conv2d(1, 8, 16, 16, 8, 3, 3, padding=1))


def test_the_hero_fills_the_gpu_only_where_128_tiles_leave_sms_idle():
    aligned = dataclasses.replace(BIG, **simt.HERO_CORE_ALIGNED)  # every operand row on 16 bytes
    for op in (Gemm(4096, 4096, 4096), Gemm(2048, 2048, 2048), Gemm(1500, 1500, 1500),
               Conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nchw", bias=True)):
        want = aligned if op.kind == "gemm" else BIG
        assert cuda.hero_schedule(op, op.kind == "gemm" and VID or "cuda-simt.conv2d", NoGpu()) == want
    for op in (Gemm(1000, 999, 1001), Gemm(512, 512, 16384), Gemm(777, 1333, 555), Gemm(64, 4096, 4096),
               Gemm(37, 1001, 4097)):
        s = cuda.hero_schedule(op, VID, NoGpu())
        blocks = simt._tiles(op, s) * s.split_k
        assert (s.bm, s.bn, s.split_k) != (BIG.bm, BIG.bn, 1) and blocks >= 0.9 * 132, (op.signature, s.name, blocks)
        assert simt.fill_cost(op, s, 4, 132) > 0
        s.validate(op)


def test_the_space_searches_split_and_small_tiles():
    from tracea.emitters.cuda.arch import parse_arch

    op = Gemm(1000, 999, 1001)
    space = cuda.search_space(op, VID, NoGpu(), arch="sm_90a")
    assert space[0] == cuda.hero_schedule(op, VID, NoGpu())
    assert {s.split_k for s in space} >= {1, 2, 4, 8} and {(32, 64), (64, 64)} <= {(s.bm, s.bn) for s in space}
    for s in space:
        s.validate(op, parse_arch("sm_90a"))
    big = cuda.search_space(Gemm(4096, 4096, 4096), VID, NoGpu(), arch="sm_90a")
    assert {s.split_k for s in big} == {1}


SPLIT_CASES = [  # (op, schedule or None for the hero)
    (Gemm(1000, 999, 1001, epilogue=("bias", "relu")), None),
    (Gemm(37, 1001, 4097), None),
    (Gemm(777, 1333, 555, layout_a="col", layout_b="col", epilogue=("residual", "scale"), alpha=0.5), None),
    (Gemm(64, 4096, 4096), None),
    (Gemm(257, 129, 65, epilogue=("bias", "relu")), dataclasses.replace(BIG, bm=64, bn=64, split_k=5)),
    (Gemm(1, 513, 8191, epilogue=("gelu",)), dataclasses.replace(BIG, bm=64, bn=128, split_k=16)),
    (Gemm(100, 70, 999), dataclasses.replace(BIG, bm=32, bn=64, bk=8, split_k=4)),
]


@pytest.fixture()
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
@pytest.mark.parametrize("op,sched", SPLIT_CASES, ids=lambda x: getattr(x, "signature", getattr(x, "name", ""))[:40])
def test_split_and_small_tiles_compile_without_spills(op, sched, arch, _cache):
    pytest.importorskip("cuda.core")
    from tracea.emitters.cuda.build import compile_kernel

    s = sched or cuda.hero_schedule(op, VID, NoGpu())
    _, r, _, art = compile_kernel(op, VID, s, NoGpu(), arch)
    res = art.metadata["resources"]
    assert res["regs_per_thread"] > 0 and res["spills"] == 0, (r.name, arch, res)
    tiles = simt._tiles(op, s)
    assert r.grid == (tiles * s.split_k, 1, 1) and r.block == (s.block_threads, 1, 1)
    if s.split_k > 1:
        want = simt_gemv.workspace_bytes(tiles, s.split_k, op.m) if s.form == "gemv" else simt_split.workspace_bytes(tiles, s)
        assert r.params[-1] == "workspace" and r.metadata["workspace_bytes"] == want
        assert re.search(r"float\* __restrict__ W\)", r.source) and "atomicAdd" in r.source
    else:
        assert "workspace" not in r.params and "atomicAdd" not in r.source
