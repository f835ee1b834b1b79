"""The TMA-fed decode GEMM (emitters/cuda/gemv_tma.py): the registry's choice, the schedule's checks, a
byte-level NumPy model of the kernel's shared memory (TMA's swizzled placement from emitters/layout.py, the
ldmatrix addresses the kernel's own expressions compute, the mma fragments), NVRTC compiles for sm_90a, and on
a GPU the kernel against the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
from mma_fragments import mma, tma_gemv_walk  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters import cuda
from tracea.emitters.cuda import cores, gemv, gemv_tma
from tracea.emitters.cuda.arch import parse_arch
from tracea.emitters.layout import TileLayout, TmaSwizzle
from tracea.kernels import Gemm


class NoGpu:
    nvidia = None


HOST = NoGpu()
HOPPER, AMPERE = "cuda-wgmma.gemm", "cuda-mma-sync.gemm"


# ---------------------------------------------------------------------------------------------- registry
@pytest.mark.parametrize("m,n,layout_b", [(1, 4096, "col"), (4, 4096, "row"), (8, 11008, "col"), (16, 14336, "row"),
                                          (32, 4096, "col")])
def test_hopper_hero_is_gemv_tma_where_tma_can_feed_it(m, n, layout_b):
    op = Gemm(m, n, 4096, "bf16", layout_b=layout_b)
    hero = cuda.hero_schedule(op, HOPPER, HOST)
    assert isinstance(hero, gemv_tma.GemvTmaSchedule)
    if m <= gemv.MAX_M:  # mma.sync: registers
        assert isinstance(cuda.hero_schedule(op, AMPERE, HOST), gemv.GemvSchedule)
    space = cuda.search_space(op, HOPPER, HOST, "sm_90a")
    assert space[0] == hero and any(isinstance(c, gemv.GemvSchedule) for c in space) == (m <= gemv.MAX_M)


@pytest.mark.parametrize("op,why", [
    (Gemm(1, 4096, 4100, "bf16"), "multiple of 8"),  # A's rows: 16-byte strides
    (Gemm(1, 4100, 4096, "bf16", layout_b="row"), "multiple of 8"),
    (Gemm(2, 4096, 4096, "bf16", layout_a="col"), "row-major"),
    (Gemm(1, 4096, 4096, "fp32"), "bf16 or fp16"),
    (Gemm(33, 4096, 4096, "bf16"), "32 rows"),
])
def test_refusals_fall_back_to_the_register_gemv(op, why):
    assert why in gemv_tma.refusal(op)
    with pytest.raises(UnsupportedError):
        gemv_tma.GemvTmaSchedule().validate(op)
    if op.m <= 16 and op.dtype.value != "fp32":  # the register gemv (above 16 rows: the tensor-core tiles)
        assert isinstance(cuda.hero_schedule(op, HOPPER, HOST), gemv.GemvSchedule)
    assert gemv_tma.refusal(Gemm(1, 4100, 4096, "bf16", layout_b="col")) is None  # n x k B: any N


def test_the_space_leaves_no_split_without_stages():
    for op in (Gemm(1, 4096, 640, "bf16"), Gemm(16, 1000, 4096, "fp16", layout_b="col"), Gemm(3, 64, 72, "bf16")):
        space = gemv_tma.search_space(op, None, None)
        assert space and all(-(-gemv_tma.k_stages(op, s) // -(-gemv_tma.k_stages(op, s) // s.splits)) == s.splits
                             for s in space)
        assert any(s.splits > 1 for s in space) == (gemv_tma.k_stages(op, gemv_tma.GemvTmaSchedule(boxes=2)) > 1)


def test_schedule_checks_and_json():
    s = gemv_tma.GemvTmaSchedule(warps=8, stages=3, boxes=2, splits=5)
    assert gemv_tma.GemvTmaSchedule.from_json(s.to_json()) == s and s.block_threads == 288
    for bad in ({"warps": 3}, {"stages": 7}, {"boxes": 3}, {"splits": 0}, {"splits": True}, {"warps": 8, "boxes": 1}):
        with pytest.raises(BadInputError):
            gemv_tma.GemvTmaSchedule(**{**dataclass_fields(s), **bad}).validate()
    with pytest.raises(BadInputError, match="shared memory"):
        gemv_tma.GemvTmaSchedule(stages=8, boxes=8).validate(Gemm(16, 4096, 4096, "bf16"))
    with pytest.raises(BadInputError, match="unknown|unexpected"):
        gemv_tma.GemvTmaSchedule.from_json({**s.to_json(), "bm": 64})
    op = Gemm(1, 4096, 4096, "bf16")
    assert cores.for_schedule(op, s).name == "gemv_tma"
    assert cuda.schedule_from_json(s.to_json()) == s
    feats = cuda.tuning_features(op, s.to_json())
    assert feats["warps"] == 9 and feats["smem_bytes"] == gemv_tma.smem_bytes(op, s)


def dataclass_fields(s):
    import dataclasses

    return dataclasses.asdict(s)


@pytest.mark.parametrize("n,k,sms", [(4096, 4096, 132), (14336, 4096, 132), (4096, 14336, 132), (4096, 4096, 114),
                                     (11008, 4096, 8), (64, 64, 132)])
def test_hero_fills_the_sms_once_with_two_blocks_room(n, k, sms):
    class Dev:
        sm_count = sms

    class Host:
        class nvidia:  # noqa: N801
            devices = [Dev()]

    for m in (1, 16, 32):
        op = Gemm(m, n, k, "bf16", layout_b="col")
        s = gemv_tma.hero_schedule(op, Host())
        tiles = -(-n // gemv.NB)
        assert tiles * s.splits <= max(sms, tiles)  # K split only while the column tiles leave SMs idle
        assert s.splits == 1 or tiles * (s.splits + 1) > sms or gemv_tma.k_stages(op, s) < 4 * (s.splits + 1)
        assert 2 * (gemv_tma.smem_bytes(op, s) + 1024) <= 228 * 1024  # room for two blocks an SM (wide N)
        assert -(-gemv_tma.k_stages(op, s) // s.splits) >= min(2, gemv_tma.k_stages(op, s))
        s.validate(op)


# ------------------------------------------------------------------------------ NumPy model of the kernel
def _box(src: np.ndarray, r0: int, c0: int, rows: int) -> np.ndarray:
    """A TMA box of ``rows`` x 64 elements of ``src`` from (r0, c0), zeros past its edges, as the bytes TMA
    writes with the 128B swizzle (emitters/layout.py's TmaSwizzle), viewed as 16-bit slots."""
    tile = np.zeros((rows, gemv_tma.KB))
    part = src[r0:r0 + rows, c0:c0 + gemv_tma.KB]
    tile[:part.shape[0], :part.shape[1]] = part
    layout = TileLayout(rows, gemv_tma.KB, 2, swizzle=TmaSwizzle("128B"))
    out = np.full(rows * gemv_tma.KB, np.nan)
    r, c = np.meshgrid(np.arange(rows), np.arange(gemv_tma.KB), indexing="ij")
    out[np.asarray(layout.offset(r, c)) // 2] = tile[r, c]
    return out


def _sw(r: int, c: int) -> int:
    return r * 128 + ((((c) ^ (r)) & 7) << 4)  # the kernel's TR_SW


def _ldmatrix(box: np.ndarray, addr: list[int], count: int, trans: bool) -> list[list[tuple[float, float]]]:
    """regs[lane][j]: ldmatrix of ``count`` 8x8 matrices, matrix j's row i at lane 8j + i's byte address."""
    regs = []
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        mine = []
        for j in range(count):
            if trans:  # the element (row 2q (+1), column g) of matrix j
                pair = tuple(box[(addr[8 * j + 2 * q + e] + 2 * g) // 2] for e in range(2))
            else:  # row g, columns 2q, 2q + 1
                pair = tuple(box[(addr[8 * j + g] + 4 * q) // 2 + e] for e in range(2))
            mine.append(pair)
        regs.append(mine)
    return regs


def _model(op: Gemm, x: np.ndarray, w: np.ndarray, s: gemv_tma.GemvTmaSchedule) -> np.ndarray:
    """The kernel's stages, warps and fragments with the lane addresses of ``gemv_tma.B_LANES``/``A_LANES``."""
    b_row, b_chunk, trans = gemv_tma.B_LANES[op.layout_b]
    a_row, a_chunk = gemv_tma.A_LANES
    mp, mg = gemv_tma.mpad(op), gemv_tma.mpad(op) // 8

    def warp_sums(n0: int, j0: int, j1: int, warp: int) -> np.ndarray:
        acc = np.zeros((4, mg, 32, 4))
        for j in range(j0, j1):
            for kk in range(warp, 4 * s.boxes, s.warps):
                bx, st = kk >> 2, kk & 3
                k0 = (j * s.boxes + bx) * gemv_tma.KB
                bbox = _box(w, n0, k0, gemv.NB) if op.layout_b == "col" else _box(w, k0, n0, gemv_tma.KB)
                abox = _box(x, 0, k0, mp)
                ev = {"st": st}
                xa = [[] for _ in range(32)]
                for h in range(max(1, mg // 2)):  # an x4 a 16-row pair of groups (x2 for one group)
                    a_addr = [_sw(16 * h + eval(a_row, {}, {**ev, "lane": ln}),
                                  eval(a_chunk, {}, {**ev, "lane": ln})) for ln in range(32)]
                    for ln, regs in enumerate(_ldmatrix(abox, a_addr, min(4, 2 * mg), False)):
                        xa[ln] += regs
                for t in range(4):
                    ev = {"st": st, "t": t}
                    b_addr = [_sw(eval(b_row, {}, {**ev, "lane": ln}), eval(b_chunk, {}, {**ev, "lane": ln}))
                              for ln in range(32)]
                    a = _ldmatrix(bbox, b_addr, 4, trans)
                    for m in range(mg):
                        mma(acc[t][m], a, [xa[ln][2 * m:2 * m + 2] for ln in range(32)])
        return acc

    return tma_gemv_walk(op, s, gemv_tma, gemv.NB, warp_sums)


@pytest.mark.parametrize("layout_b", ["row", "col"])
@pytest.mark.parametrize("m,n,k,boxes,splits", [(1, 70, 136, 1, 1), (7, 64, 200, 2, 2), (16, 40, 64, 1, 1),
                                                (9, 130, 264, 2, 3), (25, 72, 128, 2, 1), (32, 64, 64, 1, 1)])
def test_fragment_index_math(layout_b, m, n, k, boxes, splits):
    op = Gemm(m, n, k, "bf16", layout_b=layout_b)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((m, k))
    w = rng.standard_normal((k, n) if layout_b == "row" else (n, k))
    s = gemv_tma.GemvTmaSchedule(warps=2 if boxes == 1 else 4, stages=2, boxes=boxes, splits=splits)
    ref = x @ (w if layout_b == "row" else w.T)
    np.testing.assert_allclose(_model(op, x, w, s), ref, rtol=1e-9, atol=1e-9)


def test_box_bytes_follow_the_swizzle_the_kernel_reads():
    """The kernel's TR_SW(r, c) is the byte of chunk c of row r where TMA's 128B swizzle put it."""
    layout = TileLayout(64, gemv_tma.KB, 2, swizzle=TmaSwizzle("128B"))
    for r in range(64):
        for c in range(8):
            assert _sw(r, c) == layout.offset(r, 8 * c)
    assert "#define TR_SW(r, c) ((r) * 128 + ((((c) ^ (r)) & 7) << 4))" in gemv_tma.LDM2


# ------------------------------------------------------------------------------------------ NVRTC
COMPILE = [
    Gemm(1, 4096, 4096, "bf16", layout_b="col"),
    Gemm(16, 14336, 4096, "bf16", layout_b="row"),
    Gemm(16, 4096, 14336, "fp16", layout_b="col", epilogue=("bias", "relu", "gelu", "scale", "residual"), alpha=0.5),
    Gemm(3, 40, 72, "bf16", layout_b="row", epilogue=("residual",)),
    Gemm(32, 5120, 13824, "bf16", layout_b="col", epilogue=("bias", "gelu")),
    Gemm(20, 4096, 4096, "fp16", layout_b="row"),
]


@pytest.mark.parametrize("op", COMPILE, ids=lambda o: o.signature[:60])
def test_compiles_without_spills(op, kernel_home, monkeypatch):
    pytest.importorskip("cuda.core")
    from tracea.emitters.cuda.build import compile_kernel

    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    hero = gemv_tma.hero_schedule(op, HOST)
    picks = [hero, gemv_tma.GemvTmaSchedule(warps=8, stages=2, boxes=4, splits=3),  # a cluster of 3
             gemv_tma.GemvTmaSchedule(warps=2, stages=6, boxes=1, splits=12)]  # the workspace
    for s in picks:
        if gemv_tma.k_stages(op, s) < s.splits:
            continue
        _, r, _, art = compile_kernel(op, HOPPER, s, HOST, "sm_90a")
        res = art.metadata["resources"]
        assert res["regs_per_thread"] > 0 and res["spills"] == 0, f"{r.name}: {res}"
        assert art.metadata["launch"]["block"][0] == s.block_threads
        assert ("__cluster_dims__" in r.source) == (2 <= s.splits <= gemv.CLUSTER_MAX)


def test_render_is_stable_and_sized():
    op = Gemm(1, 4096, 4096, "bf16", layout_b="col")
    s = gemv_tma.hero_schedule(op, HOST)
    a, b = (gemv_tma.render_gemv_tma(op, s, parse_arch("sm_90a")) for _ in range(2))
    assert a == b and a.grid == (64, s.splits, 1) and a.block == (s.block_threads, 1, 1)
    assert a.smem == gemv_tma.smem_bytes(op, s) and a.params[:2] == ("tmA", "tmB")
    assert "tr_tma_load_2d_ef" in a.source and "tr_ldm4(a, " in a.source and "tr_ldm2(x0" in a.source
    row = gemv_tma.render_gemv_tma(Gemm(16, 4096, 4096, "bf16", layout_b="row"), s, parse_arch("sm_90a"))
    assert "tr_ldm4t(a, " in row.source and "tr_ldm4(xa0, " in row.source and "xa1" not in row.source
    wide = gemv_tma.render_gemv_tma(Gemm(32, 4096, 4096, "bf16"), s, parse_arch("sm_90a"))
    assert "tr_ldm4(xa1, sa + TR_SW(16 + " in wide.source and "tr_mma(acc[t][3], a, x3);" in wide.source


# ------------------------------------------------------------------------------------------ on a GPU
def _hopper_or_skip():
    cc = pytest.importorskip("cuda.core")
    try:
        cap = tuple(cc.Device(0).compute_capability)
    except Exception:  # noqa: BLE001 - no driver or no GPU
        pytest.skip("no CUDA GPU")
    if cap < (9, 0):
        pytest.skip("TMA needs sm_90")


GPU = [
    (Gemm(1, 4096, 4096, "bf16", layout_b="col"), None),
    (Gemm(1, 4096, 4096, "fp16", layout_b="row"), None),
    (Gemm(16, 11008, 4096, "bf16", layout_b="col", epilogue=("bias", "gelu")), None),
    (Gemm(9, 4096, 14336, "fp16", layout_b="row", epilogue=("residual",)), None),
    (Gemm(3, 33, 72, "bf16", layout_b="col", epilogue=("bias", "relu", "scale"), alpha=0.5), None),
    (Gemm(5, 200, 1000, "bf16", layout_b="row"), gemv_tma.GemvTmaSchedule(warps=2, stages=3, boxes=1, splits=16)),
    (Gemm(16, 1000, 3000, "fp16", layout_b="col"), gemv_tma.GemvTmaSchedule(warps=8, stages=2, boxes=2, splits=4)),
    (Gemm(2, 14336, 4096, "bf16", layout_b="col"), gemv_tma.GemvTmaSchedule(warps=4, stages=6, boxes=4, splits=1)),
    (Gemm(32, 4096, 4096, "bf16", layout_b="col", epilogue=("bias",)), None),
    (Gemm(27, 1000, 2056, "fp16", layout_b="row", epilogue=("residual",)), None),
    (Gemm(17, 333, 512, "bf16", layout_b="col"), gemv_tma.GemvTmaSchedule(warps=4, stages=2, boxes=2, splits=11)),
]


@pytest.mark.parametrize("op,s", GPU, ids=lambda x: x.signature[:60] if isinstance(x, Gemm) else str(x))
def test_gpu_matches_the_reference(op, s, kernel_home, monkeypatch):
    _hopper_or_skip()
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    sched = s or gemv_tma.hero_schedule(op, HOST)
    k = cuda.build(op, HOPPER, sched, HOST)
    for seed in (1, 2):  # twice: the split counters must be back at zero
        inputs = op.random_inputs(np.random.default_rng(seed))
        out = np.full(op.output_shape(), 0x7FC0 if op.dtype.value == "bf16" else np.nan, op.dtype.storage)
        k(inputs, out)
        got = to_float64(out, op.dtype)
        assert np.isfinite(got).all(), (op.signature, sched)
        err = relative_error(got, op.reference(inputs))
        assert err <= tolerance(op), (op.signature, sched, err)


def test_host_maps_follow_the_kernels_parameter_order(monkeypatch):
    """The launch passes ``maps()`` first, in the kernel's parameter order (A's map, then B's), each with
    ``map_geometry``'s boxes: checked without a driver by recording what would be encoded."""
    from tracea.emitters.cuda import tma

    seen = []
    monkeypatch.setattr(tma, "encode_2d", lambda ptr, dtype, inner, outer, stride, box: seen.append(
        (ptr, inner, outer, stride, box)) or len(seen))
    for layout_b in ("col", "row"):
        seen.clear()
        op = Gemm(3, 4096, 1024, "bf16", layout_b=layout_b)
        assert gemv_tma.maps(op, a_ptr=1 << 20, b_ptr=2 << 20) == (1, 2)
        g = gemv_tma.map_geometry(op)
        assert seen == [(1 << 20, *g["tmA"][:2], g["tmA"][0], g["tmA"][2:]), (2 << 20, *g["tmB"][:2], g["tmB"][0], g["tmB"][2:])]
        src = gemv_tma.render_gemv_tma(op, gemv_tma.hero_schedule(op, HOST), parse_arch("sm_90a")).source
        assert "(const __grid_constant__ TrTensorMap tmA, const __grid_constant__ TrTensorMap tmB, " in src
