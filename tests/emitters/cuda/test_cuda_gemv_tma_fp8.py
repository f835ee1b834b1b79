"""FP8 decode GEMMs on the TMA-fed gemv (emitters/cuda/gemv_tma.py with a ScaledGemm): the registry's choice and
refusals, a byte-level NumPy model of what the kernel reads (TMA's 128B-swizzled boxes of 128 bytes, the ldmatrix
lane addresses of the 16-bit kernel read as 8-bit quads, ``mma.sync``'s m16n8k32 fragments as PTX's ISA lays out
8-bit operands, the scales last) against the scaled float64 reference, and NVRTC compiles
for sm_90a. On a GPU: benchmarks/gpu/scaled_gemm_gpu.py --part check and tests/emitters/cuda/test_cuda_wgmma_scaled_gpu.py."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from mma_fragments import mma8, tma_gemv_walk  # tests/helpers/ (tests/conftest.py puts it on the path)

from tracea.emitters.cuda import cores, gemv, gemv_tma, gemv_tma_fp8
from tracea.emitters.cuda.arch import parse_arch
from tracea.emitters.layout import TileLayout, TmaSwizzle
from tracea.kernels import ScaledGemm
from tracea.kernels.dtypes import to_float64

VARIANT = "cuda-wgmma.scaled_gemm"


class NoGpu:
    nvidia = None


def _variant():
    from tracea.emitters.cuda import resolve

    return resolve(VARIANT)


@pytest.mark.parametrize("op", [ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "tensor"),
                                ScaledGemm(16, 14336, 4096, "fp8e4m3", "bf16", "row"),
                                ScaledGemm(4, 4096, 14336, "fp8e4m3", "bf16", "row"),
                                ScaledGemm(2, 2048, 1024, "fp8e4m3", "bf16", "row"),
                                ScaledGemm(1, 1024, 4096, "fp8e4m3", "bf16", "tensor"),
                                ScaledGemm(1, 256, 7168, "fp8e4m3", "bf16", "tensor"),
                                ScaledGemm(9, 4096, 11008, "fp8e5m2", "fp32", "row", epilogue="bias,relu")])
def test_fp8_decode_takes_the_tma_gemv(op):
    core = cores.hero_core(_variant(), op)
    assert core.name == "gemv_tma"
    hero = core.hero(op, NoGpu())
    bf16 = gemv_tma.hero_schedule(gemv_tma.view(op), NoGpu())
    if op.k >= gemv_tma.SPLIT_BYTES or bf16.splits != 2:
        assert hero == bf16  # the byte geometry of the bf16 GEMM of K/2 columns: the same ring, boxes and splits
    else:  # under 8 KiB of K a column: unsplit, with 128 KiB of B in flight a block
        assert (hero.splits, hero.boxes, hero.stages) == (1, 4, 4)


@pytest.mark.parametrize("op,why", [
    (ScaledGemm(17, 4096, 4096, "fp8e4m3", "bf16", "row"), "at most 16 rows of an FP8 A"),
    (ScaledGemm(40, 4096, 4096, "fp8e4m3", "bf16", "row"), "at most 16 rows of an FP8 A"),
    (ScaledGemm(16, 4096, 4096, "int8", "int32", "none"), "int8 runs the wgmma tiles"),
    (ScaledGemm(8, 4096, 4096, "fp8e4m3", "bf16", "block128"), "block scales run the wgmma tiles"),
    (ScaledGemm(8, 4096, 4096, "fp8e4m3", "bf16", "row", layout_b="row"), "n x k"),
])
def test_other_scaled_gemms_keep_the_wgmma_tiles(op, why):
    assert why in gemv_tma.refusal(op)
    assert cores.hero_core(_variant(), op).name == "wgmma"


# ------------------------------------------------------------------------------ NumPy model of the kernel
def _box8(src: np.ndarray, r0: int, c0: int, rows: int) -> np.ndarray:
    """A TMA box of ``rows`` x 128 8-bit values of ``src`` from (r0, c0) (64 byte pairs: the kernel's map is over
    pairs), zeros past its edges, at the bytes TMA's 128B swizzle puts them."""
    width = 2 * gemv_tma.KB
    tile = np.zeros((rows, width))
    part = src[r0:r0 + rows, c0:c0 + width]
    tile[:part.shape[0], :part.shape[1]] = part
    layout = TileLayout(rows, width, 1, swizzle=TmaSwizzle("128B"))
    out = np.full(rows * width, np.nan)
    r, c = np.meshgrid(np.arange(rows), np.arange(width), indexing="ij")
    out[np.asarray(layout.offset(r, c))] = tile[r, c]
    return out


def _sw(r: int, c: int) -> int:
    return r * 128 + (((c ^ r) & 7) << 4)  # the kernel's TR_SW


def _ldmatrix8(box: np.ndarray, addr: list[int], count: int) -> list[list[np.ndarray]]:
    """regs[lane][j]: ldmatrix (b16, not transposed) of ``count`` 8x8 matrices as four 8-bit values each: row g,
    bytes 4q..4q+3 of matrix j, whose rows lanes 8j..8j+7 address."""
    return [[box[addr[8 * j + (lane >> 2)] + 4 * (lane & 3) + np.arange(4)] for j in range(count)]
            for lane in range(32)]


def _warp(op, x, w, n0, j0, j1, warp, s) -> np.ndarray:
    """One consumer warp's sums over stages j0..j1 of column tile n0: acc[t][m][lane][e]."""
    b_row, b_chunk, _ = gemv_tma.B_LANES["col"]
    a_row, a_chunk = gemv_tma.A_LANES
    mp, mg = gemv_tma.mpad(op), gemv_tma.mpad(op) // 8
    acc = np.zeros((4, mg, 32, 4))
    for j in range(j0, j1):
        for kk in range(warp, 4 * s.boxes, s.warps):
            bx, st = kk >> 2, kk & 3
            k0 = (j * s.boxes + bx) * 2 * gemv_tma.KB
            bbox, abox = _box8(w, n0, k0, gemv.NB), _box8(x, 0, k0, mp)
            xa: list[list[np.ndarray]] = [[] for _ in range(32)]
            for h in range(max(1, mg // 2)):
                addr = [_sw(16 * h + eval(a_row, {}, {"st": st, "lane": ln}), eval(a_chunk, {}, {"st": st, "lane": ln}))
                        for ln in range(32)]
                for ln, regs in enumerate(_ldmatrix8(abox, addr, min(4, 2 * mg))):
                    xa[ln] += regs
            for t in range(4):
                ev = {"st": st, "t": t}
                addr = [_sw(eval(b_row, {}, {**ev, "lane": ln}), eval(b_chunk, {}, {**ev, "lane": ln}))
                        for ln in range(32)]
                a = _ldmatrix8(bbox, addr, 4)
                for m in range(mg):
                    mma8(acc[t][m], a, [xa[ln][2 * m:2 * m + 2] for ln in range(32)])
    return acc


def _model(op: ScaledGemm, x: np.ndarray, w: np.ndarray, s: gemv_tma.GemvTmaSchedule, sa, sb) -> np.ndarray:
    out = tma_gemv_walk(op, s, gemv_tma, gemv.NB, lambda n0, j0, j1, warp: _warp(op, x, w, n0, j0, j1, warp, s))
    return out * sa.reshape(-1, 1) * sb.reshape(1, -1)


@pytest.mark.parametrize("m,n,k,scale,boxes,splits", [(1, 70, 272, "tensor", 1, 1), (7, 64, 528, "row", 2, 2),
                                                      (16, 40, 256, "row", 1, 1), (12, 72, 400, "tensor", 2, 1)])
def test_fragment_index_math_of_the_fp8_mma(m, n, k, scale, boxes, splits):
    """The model over the kernel's own lane expressions, on real e4m3 codes, equals the scaled float64 product
    (K off the boxes: TMA's zeros; N off the 64-column tiles)."""
    op = ScaledGemm(m, n, k, "fp8e4m3", "fp32", scale)
    inputs = op.random_inputs(np.random.default_rng(5))
    x, w = (to_float64(inputs[n_], op.dtype) for n_ in ("a", "b"))
    s = gemv_tma.GemvTmaSchedule(warps=2 if boxes == 1 else 4, stages=2, boxes=boxes, splits=splits)
    got = _model(op, x, w, s, inputs["scale_a"].astype(np.float64), inputs["scale_b"].astype(np.float64))
    np.testing.assert_allclose(got, op.reference(inputs), rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------------------------------ NVRTC
@pytest.mark.parametrize("op", [ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "tensor"),
                                ScaledGemm(16, 4096, 14336, "fp8e4m3", "fp16", "row"),
                                ScaledGemm(16, 11008, 4096, "fp8e5m2", "fp32", "row", epilogue="bias,gelu,residual"),
                                ScaledGemm(3, 136, 1040, "fp8e4m3", "bf16", "tensor", epilogue="bias,relu,scale",
                                           alpha=0.5)], ids=lambda o: o.case_label())
def test_fp8_gemv_compiles_without_spills(op, kernel_home, monkeypatch):
    pytest.importorskip("cuda.core")
    build = importlib.import_module("tracea.emitters.cuda.build")

    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))
    for s in (gemv_tma.hero_schedule(op, NoGpu()), gemv_tma.GemvTmaSchedule(warps=8, stages=2, boxes=4, splits=3),
              gemv_tma.GemvTmaSchedule(warps=4, stages=3, boxes=2, splits=12)):
        if gemv_tma.k_stages(op, s) < s.splits or (s.warps == 8 and op.m > 8):  # (refused: it spills)
            continue
        _, r, _, art = build.compile_kernel(op, VARIANT, s, NoGpu(), "sm_90a")
        res = art.metadata["resources"]
        assert res["regs_per_thread"] > 0 and res["spills"] == 0, f"{r.name}: {res}"
        t = gemv_tma_fp8.MMA_8BIT[op.dtype.value]
        assert f"mma.sync.aligned.m16n8k32.row.col.f32.{t}.{t}.f32" in r.source and "m16n8k16" not in r.source
        assert r.params == ("tmA", "tmB", "out", "scale_a", "scale_b", "bias", "residual", "workspace", "alpha")


def test_narrow_fp8_decode_keeps_its_k_split():
    """Few column tiles (16 at N = 1024, 4 at N = 256) still split K to fill the SMs: the unsplit rule is for tiles
    filling a third to a half of them (measured at N = 4096)."""
    for n, k in ((1024, 4096), (256, 7168)):
        op = ScaledGemm(1, n, k, "fp8e4m3", "bf16", "tensor")
        hero = gemv_tma.hero_schedule(op, NoGpu())
        assert hero.splits >= 4 and hero == gemv_tma.hero_schedule(gemv_tma.view(op), NoGpu())


def test_eight_warps_are_refused_where_sixteen_fp8_rows_would_spill():
    from tracea.doctor.errors import BadInputError

    op = ScaledGemm(16, 4096, 4096, "fp8e4m3", "bf16", "row")
    with pytest.raises(BadInputError, match="spill"):
        gemv_tma.GemvTmaSchedule(warps=8, boxes=4).validate(op)
    assert all(s.warps == 4 for s in gemv_tma.search_space(op, None, parse_arch("sm_90a")))
    gemv_tma.GemvTmaSchedule(warps=8, boxes=4).validate(ScaledGemm(8, 4096, 4096, "fp8e4m3", "bf16", "row"))


def test_the_scales_apply_to_the_finished_sum_before_the_epilogue():
    op = ScaledGemm(16, 4096, 4096, "fp8e4m3", "bf16", "row", epilogue="bias,gelu")
    src = gemv_tma.render_gemv_tma(op, gemv_tma.hero_schedule(op, NoGpu()), parse_arch("sm_90a")).source
    scaled = src.index("v *= __ldg(scale_a + m) * __ldg(scale_b + n);")
    assert scaled < src.index("bias[n]", scaled) < src.index("tr_gelu(", scaled) < src.index("Cout[", scaled)
    tensor = ScaledGemm(1, 4096, 4096, "fp8e4m3", "fp32", "tensor")
    assert "v *= __ldg(scale_a) * __ldg(scale_b);" in gemv_tma.render_gemv_tma(
        tensor, gemv_tma.hero_schedule(tensor, NoGpu()), parse_arch("sm_90a")).source
