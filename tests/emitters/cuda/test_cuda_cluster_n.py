"""2-block clusters along N in the Hopper GEMM (``cluster_axis = "n"``): the pair are neighbouring tile
columns sharing one A tile (each block loads half of it and multicasts it to both). The schedule field
(validation, JSON, name, the search space, the conv's refusal), the walk as the kernel compiles it (host
g++, checked with NumPy: every output tile and k step covered once, the pair in lockstep, split-K slots
one per output tile, odd tile-column counts), the tensor-map boxes and NVRTC compiles for sm_90a with
no spills. The GPU runs are tests/emitters/cuda/test_cuda_cluster_n_gpu.py."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda.hopper import gemm, scheduler, splitk, tiles
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule
from tracea.emitters.cuda.hopper.space import conv_search_space, search_space
from tracea.kernels import Conv2d, Gemm

N128x64 = WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, cluster=2, cluster_axis="n", store="tma")
N64x128 = WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, cluster_axis="n", store="tma")


# ------------------------------------------------------------------------------------------ schedule


def test_cluster_axis_validates_naming_the_field():
    for bad in (dict(cluster_axis="k"), dict(cluster_axis=1), dict(cluster_axis="n", cluster=1)):
        with pytest.raises(BadInputError, match="cluster_axis"):
            dataclasses.replace(N64x128, **bad).validate()
    # along N the pair shares A, so B need not split into two 64-column halves (along M it must)
    N128x64.validate(Gemm(512, 512, 16384, "bf16"))
    with pytest.raises(BadInputError, match="bn"):
        dataclasses.replace(N128x64, cluster_axis="m").validate()
    for conv in (WgmmaConvSchedule(bm=128, bn=128, stages=4, consumers=2, cluster=2, cluster_axis="n"),
                 WgmmaConvSchedule.of_gemm(N64x128)):
        with pytest.raises(BadInputError, match="cluster_axis"):
            conv.validate()


def test_json_round_trip_and_name():
    for s in (N128x64, dataclasses.replace(N64x128, split=4, split_fix="spread", pingpong=False)):
        d = s.to_json()
        assert d["cluster_axis"] == "n" and WgmmaSchedule.from_json(d) == s
        assert "_cl2n" in s.name
    m = dataclasses.replace(N64x128, cluster_axis="m", bn=128)
    assert "cluster_axis" not in m.to_json() and "_cl2_" in m.name and "_cl2n" not in m.name
    assert WgmmaSchedule.from_json(m.to_json()).cluster_axis == "m"
    with pytest.raises(BadInputError, match="cluster_axis"):
        WgmmaSchedule.from_json({**N128x64.to_json(), "cluster_axis": "z"}).validate()


def test_search_space_holds_the_cuBLAS_form_and_the_conv_none():
    op = Gemm(512, 512, 16384, "bf16")
    space = search_space(op)
    n = [s for s in space if s.cluster_axis == "n"]
    assert dataclasses.replace(N128x64, split=4) in n and dataclasses.replace(N64x128, split=0) in n
    assert {s.split for s in n} == {0, 1, 4} and len(set(space)) == len(space)
    big = [s for s in search_space(Gemm(8192, 8192, 4096, "bf16")) if s.cluster_axis == "n"]
    assert big and {s.split for s in big} == {1}  # split-K forms only where tiles can leave SMs idle
    one = Conv2d(1, 1024, 14, 14, 256, 1, 1, layout="nhwc", dtype="fp16")
    assert all(s.cluster_axis == "m" for s in conv_search_space(one))


def test_tma_boxes_halve_a_along_n():
    rowrow = gemm.tma_boxes(Gemm(512, 512, 16384, "bf16", layout_b="col"), N128x64)
    assert rowrow["a"]["box"] == (64, 64) and rowrow["b"]["box"] == (64, 64)  # 64 of A's 128 rows; all of B
    colcol = gemm.tma_boxes(Gemm(200, 136, 1000, "fp16", layout_a="col", layout_b="col"), N128x64)
    assert colcol["a"]["box"] == (64, 32) and colcol["b"]["box"] == (64, 64)  # half of each atom's k lines
    m = gemm.tma_boxes(Gemm(512, 512, 16384, "bf16", layout_b="col"), dataclasses.replace(N64x128, cluster_axis="m"))
    assert m["a"]["box"] == (64, 64) and m["b"]["box"] == (64, 64)  # along M: half of B's 128 rows


@pytest.mark.parametrize("layout_a", ["row", "col"])
@pytest.mark.parametrize("bm, consumers", [(64, 1), (128, 2), (192, 3)])
def test_the_pair_loads_the_whole_a_tile_once_each_half_where_wgmma_reads_it(layout_a, bm, consumers):
    """The A loads as rendered, evaluated for both ranks: each box lands where the operand layout puts
    its rows (K-major: line r = row r; MN-major: atom i holds rows 64i.., line j = k step j), and the
    two blocks' boxes tile the stage's A bytes exactly once."""
    import re

    from tracea.emitters.cuda.hopper.mainloop import operand_layouts

    op = Gemm(1024, 512, 4096, "bf16", layout_a=layout_a)
    sched = WgmmaSchedule(bm=bm, bn=64, stages=4, consumers=consumers, cluster=2, cluster_axis="n")
    inner, outer = gemm.tma_boxes(op, sched)["a"]["box"]
    a_bytes = sum(t.size_bytes for t in operand_layouts(bm, layout_a == "row"))
    loads = re.findall(r"tr_tma_load_2d_mc\(([^;]*), &tmA, ([^,]*), ([^,]*), full, 3\);", gemm.render(op, sched))
    assert loads
    owner = np.full(a_bytes, -1)
    tm, kk = 3, 5
    for rank in (0, 1):
        env = {"sa": 0, "rank": rank, "tm": tm, "kk": kk}
        for dst, c0, c1 in loads:
            dst, c0, c1 = (eval(e.replace("u", ""), {}, env) for e in (dst, c0, c1))  # noqa: S307 - our own text
            size = inner * outer * 2
            assert np.all(owner[dst:dst + size] == -1)
            owner[dst:dst + size] = rank
            if layout_a == "row":  # (k, row): lines of 128 B, one per row of the tile
                assert c0 == kk * 64 and c1 - tm * bm == dst // 128
            else:  # (row, k): atom dst // 8192 holds rows 64i.., its line j is k step kk * 64 + j
                assert c0 - tm * bm == 64 * (dst // 8192) and c1 - kk * 64 == dst % 8192 // 128
    assert np.all(owner >= 0) and (owner == 0).sum() == (owner == 1).sum() == a_bytes // 2


# ------------------------------------------------------------------------------------------ the walk

WALK = r"""#include <stdio.h>
#include <algorithm>
using std::min;
#define __device__
#define __forceinline__ inline
struct Dim { int x; };
%(order)s
%(unit)s
int main(void) {
    int M, N, K, splits, dp_tiles, grid;
    while (scanf("%%d %%d %%d %%d %%d %%d", &M, &N, &K, &splits, &dp_tiles, &grid) == 6) {
        const Dim gridDim = {grid};
        for (int b = 0; b < grid; ++b) {
            const Dim blockIdx = {b};
%(walk)s
            const int tiles = %(tiles)s, k_iters = (K + 63) / 64;
            const int units = dp_tiles + (tiles - dp_tiles) * splits;
            for (int unit = cluster_id; unit < units; unit += clusters) {
                int tile, kb, ke, sidx;
                tr_unit(unit, k_iters, splits, dp_tiles, tile, kb, ke, sidx);
                int tm, tn;
%(coords)s
                printf("%%d %%d %%d %%d %%d %%d %%d\n", b, tm, tn, kb, ke, sidx, (tile - dp_tiles) * %(cl)d + rank);
            }
        }
        printf("end\n");
    }
    return 0;
}
"""


def _walks(tmp_path, sched, shapes):
    """For each (M, N, K): the plan and the rows (block, tm, tn, kb, ke, sidx, slot) the compiled walk
    gives, every block of the grid visited."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    src = WALK % dict(order=tiles.tile_order(sched), unit=splitk.UNIT_FN, walk=tiles.tile_walk(sched),
                      tiles=" * ".join(tiles.cluster_tile_counts(sched)), cl=sched.cluster,
                      coords=tiles.tile_coords(sched, " " * 16))
    exe = tmp_path / f"walk_{sched.name}"
    (tmp_path / "w.cc").write_text(src)
    subprocess.run([cxx, "-O1", "-o", str(exe), str(tmp_path / "w.cc")], check=True)
    plans, stdin = [], ""
    for m, n, k in shapes:
        plan = splitk.plan(sched, m, n, splitk.k_steps(k), 132)
        grid = scheduler.launch_geometry(sched, m, n, 132, None, plan)[0]
        plans.append((plan, grid))
        stdin += f"{m} {n} {k} {plan.splits} {plan.dp_tiles} {grid}\n"
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True).stdout
    blocks = out.split("end\n")[:-1]
    return [(plan, grid, np.array([[int(x) for x in line.split()] for line in text.splitlines()]).reshape(-1, 7))
            for (plan, grid), text in zip(plans, blocks, strict=True)]


SHAPES = [(512, 512, 16384), (1000, 999, 1001), (200, 136, 1000), (64, 64, 128), (777, 1333, 5555), (8192, 4160, 64)]


@pytest.mark.parametrize("sched", [N128x64, N64x128, dataclasses.replace(N128x64, raster="n", group=3),
                                   dataclasses.replace(N64x128, split=4), dataclasses.replace(N128x64, split=0),
                                   dataclasses.replace(N128x64, split=0, split_tail=True),
                                   dataclasses.replace(N64x128, persistent=False, split=3),
                                   dataclasses.replace(N64x128, cluster_axis="m", bn=128, split=0)],
                         ids=lambda s: s.name)
def test_the_compiled_walk_covers_every_tile_and_k_step_once(tmp_path, sched):
    along_n = sched.cluster_axis == "n"
    for (m, n, k), (plan, grid, rows) in zip(SHAPES, _walks(tmp_path, sched, SHAPES), strict=True):
        tiles_m, tiles_n, k_iters = -(-m // sched.bm), -(-n // sched.bn), splitk.k_steps(k)
        assert grid % 2 == 0 and rows[:, 0].max() < grid and plan.tiles == tiles.cluster_tiles(sched, m, n)
        b, tm, tn, kb, ke, sidx, slot = rows.T
        # the pair walks in lockstep: the same units, k ranges and shared tile, neighbouring tiles
        first, second = rows[b % 2 == 0], rows[b % 2 == 1]
        assert len(first) == len(second)
        shared, own = (1, 2) if along_n else (2, 1)
        assert np.array_equal(first[:, [shared, 3, 4, 5, 6]], second[:, [shared, 3, 4, 5, 6]] - [0, 0, 0, 0, 1])
        assert np.array_equal(second[:, own], first[:, own] + 1) and np.all(first[:, own] % 2 == 0)
        # only the second block of the last pair may fall past the edge (odd tile count), never its peer
        past = (tn >= tiles_n) if along_n else (tm >= tiles_m)
        assert np.all(b[past] % 2 == 1) and np.all((tm < tiles_m) if along_n else (tn < tiles_n))
        assert past.any() == bool((tiles_n if along_n else tiles_m) % 2)
        # every (output tile, k step) exactly once
        cover = np.zeros((tiles_m + 1, tiles_n + 1, k_iters), np.int64)
        for r in rows[~past]:
            cover[r[1], r[2], r[3]:r[4]] += 1
        assert np.all(cover[:tiles_m, :tiles_n] == 1) and cover[tiles_m].sum() == cover[:, tiles_n].sum() == 0
        # split-K: each split output tile's slices share one workspace slot of its own, within the plan's
        split = rows[(sidx >= 0) & ~past]
        assert (len(split) > 0) == (plan.splits > 1)
        if len(split):
            assert np.all(np.bincount(split[:, 5], minlength=plan.splits)[: plan.splits] > 0)
            by_tile = {(r[1], r[2]): set() for r in split}
            for r in split:
                by_tile[(r[1], r[2])].add(r[6])
            slots = [s.pop() for s in by_tile.values() if len(s) == 1]
            assert len(slots) == len(by_tile) == len(set(slots))
            assert max(rows[sidx >= 0][:, 6]) < plan.sem_count


# ------------------------------------------------------------------------------------------ NVRTC

# Compiled here (0 spills) and run on an sm_90 GPU by tests/emitters/cuda/test_cuda_cluster_n_gpu.py.
COLCOL = Gemm(200, 136, 1000, "fp16", layout_a="col", layout_b="col", epilogue=("bias", "gelu", "residual"))
N128 = WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, cluster=2, cluster_axis="n", store="tma")
COMPILE_CASES = [
    # the tail shape, cuBLAS's form (128 x 64, split 4: 128 blocks), and others: B column-major, spread
    # fix-up, no split with raster n
    (Gemm(512, 512, 16384, "bf16"), dataclasses.replace(N128x64, split=4)),
    (Gemm(512, 512, 16384, "bf16", layout_b="col"), dataclasses.replace(N64x128, split=0)),
    (Gemm(512, 512, 16384, "bf16"), dataclasses.replace(N128x64, split=0, split_fix="spread")),
    (Gemm(512, 512, 16384, "bf16"), dataclasses.replace(N128x64, raster="n")),
    # odd edges: column-major A of one atom (bm 64: half of its k lines each), direct stores; ping-pong
    # split; one block per cluster tile (not persistent)
    (Gemm(1000, 999, 1001, "bf16", layout_a="col"), dataclasses.replace(N64x128, store="direct")),
    (Gemm(1000, 999, 1001, "bf16"), dataclasses.replace(N128, pingpong=True, split=4)),
    (Gemm(1000, 999, 1001, "bf16", layout_b="col"), dataclasses.replace(N64x128, persistent=False, split=3)),
    # three tile columns (the last pair's second block past N), col/col, fused epilogue: ping-pong, split
    # with direct stores, spread
    (COLCOL, dataclasses.replace(N128x64, pingpong=True)),
    (COLCOL, dataclasses.replace(N128x64, split=4, store="direct")),
    (COLCOL, dataclasses.replace(N128x64, split=0, split_fix="spread")),
    # eleven tile columns, split over every SM
    (Gemm(777, 1333, 1001, "bf16", epilogue=("bias", "relu")), dataclasses.replace(N128, split=0)),
]


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    return find_nvrtc()


@pytest.mark.parametrize("case", COMPILE_CASES, ids=lambda c: c[1].name + "-" + c[0].signature[:24])
def test_cluster_n_kernels_compile_for_sm90a_without_spills(nvrtc, case):
    from test_cuda_splitk import _compile

    op, sched = case
    src = gemm.render(op, sched)
    assert "tr_tma_load_2d_mc(sa" in src and "tn = tn * 2 + rank;" in src and "tm = tm * 2" not in src
    assert "tr_mbar_arrive_remote" in src and ("tn * 64 < N" in src or "tn * 128 < N" in src or sched.store != "tma")
    assert _compile(src, sched.name) == (0, 0, 0), sched.name
