"""The Hopper 8-bit GEMM with scales (emitters/cuda/hopper/scaled_gemm.py) without a GPU: its checks and refusals,
the byte-pair geometry it shares with the bf16 GEMM, what each scale mode and output type puts in the kernel, the
heroes, and NVRTC compiles for sm_90a of every scaling mode without spills (the GPU run: test_cuda_wgmma_scaled_gpu.py,
benchmarks/gpu/scaled_gemm_checks.sh)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters.cuda.hopper import scaled_gemm as sg
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule as W
from tracea.kernels import ScaledGemm

TILE = W(bm=128, bn=128, stages=6, consumers=2, store="tma")


def test_the_kernel_refuses_what_8_bit_wgmma_cannot_read():
    with pytest.raises(UnsupportedError, match="K-major"):
        sg.check(ScaledGemm(256, 256, 256, "fp8e4m3", "bf16", "row", layout_b="row"), TILE)
    with pytest.raises(UnsupportedError, match="multiple of 16"):
        sg.check(ScaledGemm(256, 256, 264 + 4, "fp8e4m3", "bf16", "row"), TILE)
    fp8 = ScaledGemm(256, 256, 256, "fp8e4m3", "bf16", "row")
    with pytest.raises(BadInputError, match="registers"):
        sg.check(fp8, W(bm=128, bn=256, stages=4, consumers=2, pingpong=True))  # 256 sums a thread, 128 products
    sg.check(fp8, W(bm=128, bn=256, stages=4, consumers=2))  # folded in two column parts: 128 sums, 64 products
    with pytest.raises(BadInputError, match="TMA store stages 16-bit"):
        sg.check(ScaledGemm(256, 256, 256, "fp8e4m3", "fp32", "row"), TILE)
    block = ScaledGemm(16, 384, 256, "fp8e4m3", "bf16", "block128")
    for form in (W(bm=64, bn=64, consumers=1, swap=True), W(bm=64, bn=192, consumers=1),
                 W(bm=128, bn=128, consumers=2, cluster=2, cluster_axis="n")):  # swapped; two blocks; a pair along N
        with pytest.raises(BadInputError, match="one 128-column scale block"):
            sg.check(block, form)
    with pytest.raises(UnsupportedError, match="int8 with block scales"):
        sg.check(ScaledGemm(256, 256, 256, "int8", "fp32", "block128"), W(bm=128, bn=128, consumers=2))
    i8 = ScaledGemm(256, 256, 256, "int8", "int32", "none")
    with pytest.raises(BadInputError, match="integer wgmma"):
        sg.check(i8, W(bm=64, bn=40, consumers=1, swap=True))
    with pytest.raises(BadInputError, match="split-K"):
        sg.check(i8, W(bm=128, bn=128, consumers=2, split=2))
    sg.check(i8, W(bm=128, bn=256, stages=4, consumers=2))  # int8 keeps the bf16 GEMM's widest tile


def test_the_geometry_is_the_bf16_gemms_over_byte_pairs():
    op = ScaledGemm(300, 520, 2048, "fp8e4m3", "bf16", "row")
    view = sg.byte_view(op)
    assert (view.m, view.n, view.k, view.dtype.value, view.layout_a, view.layout_b) == (300, 520, 1024, "bf16", "row",
                                                                                         "col")
    r = sg.rendered(op, dataclasses.replace(TILE, split=2), 132)
    assert r.params[:10] == ("tmA", "tmB", "tmC", "out", "scale_a", "scale_b", "M", "N", "K", "store_tma")
    assert r.metadata["split_k"]["splits"] == 2 and r.metadata["tile"]["K"] == 128
    assert r.metadata["fragments"]["dtype_acc"].startswith("fp32, promoted")


@pytest.mark.parametrize("dtype,ptx", [("fp8e4m3", "f32.e4m3.e4m3"), ("fp8e5m2", "f32.e5m2.e5m2"), ("int8", "s32.s8.s8")])
def test_each_input_type_renders_its_wgmma(dtype, ptx):
    out, scale = ("int32", "none") if dtype == "int8" else ("bf16", "tensor")
    src = sg.render(ScaledGemm(256, 256, 512, dtype, out, scale), dataclasses.replace(TILE, store="direct"))
    assert f"m64n128k32.{ptx}" in src
    assert ("step_acc" in src) == (dtype != "int8")  # FP8 promotes every k step; int8 sums exactly in s32
    assert ("int acc[" in src) == (dtype == "int8")


def test_the_scale_modes_land_where_they_apply():
    tensor = sg.render(ScaledGemm(256, 256, 512, "fp8e4m3", "bf16", "tensor"), TILE)
    assert "const float sab = __ldg(scale_a) * __ldg(scale_b);" in tensor and "acc[i][j] *= sab;" in tensor
    row = sg.render(ScaledGemm(256, 256, 512, "fp8e4m3", "bf16", "row"), TILE)
    assert "__ldg(scale_a + r)" in row and "__ldg(scale_b + c)" in row  # the pass over the sums, before the stores
    swapped = sg.render(ScaledGemm(16, 256, 512, "fp8e4m3", "bf16", "row"), W(bm=64, bn=16, consumers=1, swap=True))
    assert "__ldg(scale_b + r)" in swapped and "__ldg(scale_a + c)" in swapped  # C^T: B's rows, A's columns
    split = sg.render(ScaledGemm(256, 256, 512, "fp8e4m3", "fp16", "row"), dataclasses.replace(TILE, split=2))
    assert "__ldg(scale_a + row) * __ldg(scale_b + col)" in split  # per element beside split-K's fix-up
    block = sg.render(ScaledGemm(256, 256, 512, "fp8e4m3", "bf16", "block128"), TILE)
    assert "sa_k1[i][(j >> 1) & 1] * sb_k1[c]" in block and "(int64_t)r * k_iters + (kk + 1)" in block
    raw = sg.render(ScaledGemm(256, 256, 512, "int8", "int32", "none"), dataclasses.replace(TILE, store="direct"))
    assert "int* __restrict__ C" in raw and "make_int2(out[0], out[1])" in raw and "__ldg(scale_a" not in raw


def test_the_heroes():
    decode = sg.hero_schedule(ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "row"), 132)
    assert decode.swap and decode.bn == 8 and decode.split == 0
    assert sg.hero_schedule(ScaledGemm(24, 4096, 4096, "int8", "int32", "none"), 132).bn == 24
    assert sg.hero_schedule(ScaledGemm(40, 4096, 4096, "int8", "int32", "none"), 132).bn == 48  # integer n
    small = sg.hero_schedule(ScaledGemm(128, 4096, 4096, "fp8e4m3", "bf16", "row"), 132)
    assert (small.bm, small.bn, small.consumers, small.split) == (64, 64, 1, 1)  # one wave of 128 tiles
    assert sg.fold_form(small) == (2, 1) and "int ptm" in sg.render(ScaledGemm(128, 4096, 4096, "fp8e4m3", "bf16",
                                                                               "row"), small)
    assert sg.hero_schedule(ScaledGemm(128, 4096, 14336, "fp8e4m3", "bf16", "tensor"), 132) == small  # long K too
    for op in (ScaledGemm(256, 4096, 4096, "fp8e4m3", "bf16", "tensor"), ScaledGemm(128, 2048, 8192, "fp8e4m3",
                                                                                     "bf16", "row"),  # 64 blocks
               ScaledGemm(128, 4096, 4096, "fp8e4m3", "bf16", "block128")):  # two waves; half the SMs; block scales
        split = sg.hero_schedule(op, 132)
        assert (split.bm, split.bn, split.consumers, split.split) == (64, 128, 1, 0), op
    big = sg.hero_schedule(ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp32", "row"), 132)
    assert (big.bm, big.bn, big.consumers, big.store) == (128, 128, 2, "direct") and sg.fold_form(big) == (2, 1)
    blocks = sg.hero_schedule(ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "block128"), 132)
    assert (blocks.bm, blocks.bn) == (128, 256) and sg.fold_form(blocks) == (1, 2)
    # split-K is chosen on 128 x 128 tile counts, as for row scales: 512 rows keep whole tiles
    mid = sg.hero_schedule(ScaledGemm(512, 4096, 4096, "fp8e4m3", "bf16", "block128"), 132)
    assert (mid.bn, mid.split) == (256, 1)
    wide = sg.hero_schedule(ScaledGemm(4096, 4096, 4096, "int8", "int32", "none"), 132)
    assert (wide.bn, wide.split) == (256, 1)
    block = sg.hero_schedule(ScaledGemm(16, 4096, 4096, "fp8e4m3", "bf16", "block128"), 132)
    assert not block.swap
    for op in (ScaledGemm(16, 4096, 4096, "fp8e4m3", "fp16", "tensor"), ScaledGemm(700, 1000, 1040, "int8", "bf16", "row")):
        space = sg.search_space_scaled(op)
        assert space[0] == sg.hero_schedule(op) and len(space) > 20 and len(set(space)) == len(space)


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    return find_nvrtc()


def test_the_promotion_takes_the_first_form_that_fits_a_consumers_registers():
    assert sg.fold_form(TILE) == (2, 1)  # 64 sums + 2 x 64 products a thread: one step issued while one is added
    assert sg.fold_form(dataclasses.replace(TILE, split=2)) == (1, 1)  # split-K's fix-up beside two sets spills
    assert sg.fold_form(dataclasses.replace(TILE, bn=192, stages=4)) == (1, 1)
    assert sg.fold_form(dataclasses.replace(TILE, bn=256, stages=4)) == (1, 2)  # 128 sums + 64 products
    assert sg.fold_form(W(bm=128, bn=256, stages=4, consumers=2, pingpong=True)) is None
    op = ScaledGemm(256, 512, 1024, "fp8e4m3", "bf16", "block128")
    wide = sg.render(op, dataclasses.replace(TILE, bn=256, stages=4))
    assert "m64n128k32.f32.e4m3.e4m3" in wide and "sb_k[c] = c0 < N" in wide  # a scale block a column part
    double = sg.render(op, TILE)
    assert "step_acc0" in double and "step_acc1" in double and "TR_WGMMA_WAIT(1)" in double
    assert "sa_k0" in double and "sa_k1" in double  # each set's step keeps its own block scales
    assert sg.rendered(op, TILE, 132).metadata["fragments"]["dtype_acc"].endswith("two product sets")


FORMS = [
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "tensor"), TILE),
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "row"), W(bm=128, bn=256, stages=4, consumers=2, store="tma")),
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp16", "tensor"), W(bm=128, bn=192, stages=4, consumers=2)),
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp32", "row"), dataclasses.replace(TILE, store="direct")),
    (ScaledGemm(4096, 4096, 4096, "fp8e5m2", "fp16", "row"), dataclasses.replace(TILE, cluster=2)),
    (ScaledGemm(300, 4096, 4096, "fp8e4m3", "fp32", "row"), dataclasses.replace(TILE, store="direct", split=0)),
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "block128"), TILE),
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "block128"), None),
    (ScaledGemm(128, 4096, 4096, "fp8e4m3", "fp32", "block128"), W(bm=64, bn=128, stages=5, consumers=1, split=0)),
    (ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "row"), None),
    (ScaledGemm(16, 4096, 14336, "fp8e4m3", "fp32", "tensor"), None),
    (ScaledGemm(128, 4096, 4096, "fp8e4m3", "bf16", "row"), None),
    (ScaledGemm(4096, 4096, 4096, "int8", "int32", "none"), None),
    (ScaledGemm(2048, 4096, 4096, "int8", "bf16", "row"), None),
    (ScaledGemm(16, 4096, 4096, "int8", "int32", "none"), None),
    (ScaledGemm(1, 4096, 4096, "int8", "fp32", "tensor"), None),
    # FP8 C with its amax (hopper/fp8_out.py): the heroes (staged, 64 x 64 direct, the gemv), split-K, cluster,
    # swapped, a chain; the 64 x 128 split-K hero of 128 rows (one consumer: the staging atom's parity carried)
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor"), None),
    (ScaledGemm(128, 4096, 4096, "fp8e4m3", "fp8e4m3", "row"), None),
    (ScaledGemm(1, 4096, 4096, "fp8e4m3", "fp8e5m2", "tensor"), None),
    (ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp8e4m3", "block128"), None),
    (ScaledGemm(300, 520, 2048, "fp8e5m2", "fp8e4m3", "row"), dataclasses.replace(TILE, store="direct", split=2)),
    (ScaledGemm(256, 512, 1024, "fp8e4m3", "fp8e4m3", "row", epilogue="bias,gelu,residual"),
     dataclasses.replace(TILE, store="direct", cluster=2)),
    (ScaledGemm(128, 1024, 4096, "fp8e4m3", "fp8e4m3", "tensor"), None),
]


@pytest.mark.parametrize("op,sched", FORMS, ids=lambda x: x.case_label() if isinstance(x, ScaledGemm) else "")
def test_every_scaling_mode_compiles_for_sm90a_without_spills(nvrtc, op, sched):
    sched = sched or sg.hero_schedule(op, 132)
    _compiles_clean(sg.render(op, sched), sched.name)


def _compiles_clean(source: str, what: str) -> None:
    from tracea.emitters.nvrtc import compile_with_report, options_for

    _, log = compile_with_report(source, "scaled.cu", None, options_for("sm_90a"))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert m and m.groups() == ("0", "0", "0"), (what, log[-400:])
    assert "C7517" not in log, log  # no wait of ptxas's own between a step's issue and the last one's additions
    assert "C7511" not in log, log  # nor wgmmas serialized for want of registers (the overlapped walk's risk)


def test_the_fused_epilogue_renders_after_the_scales_and_compiles_clean(nvrtc):
    """The chain after the scales in each store form (TMA staging, direct fp32, swapped decode), bias along C's
    columns (verified on an H200: docs/device-runs/h200-fp8-int8-gemm/call24)."""
    op = ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "row", epilogue="bias,gelu,residual")
    assert sg.refusal(op) is None
    src = sg.render(op, TILE)
    stored = src.index("if (ptm >= 0)")
    assert src.index("__ldg(scale_b + c)", stored) < src.index("bias[col]", stored) \
        < src.index("tr_gelu(v)", stored) < src.index("residual[(int64_t)row * N + col]", stored)
    _compiles_clean(src, "epilogue, TMA store")
    assert sg.rendered(op, TILE, 132).params[4:9] == ("scale_a", "scale_b", "bias", "residual", "alpha")
    assert sg.kernel_scalars(op, TILE)["alpha"] == 1.0 and "bias" not in sg.render(ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16"), TILE)
    wide = ScaledGemm(4096, 4096, 4096, "fp8e4m3", "fp32", "tensor", epilogue="bias,relu,scale", alpha=0.5)
    _compiles_clean(sg.render(wide, dataclasses.replace(TILE, store="direct")), "epilogue, fp32 direct")
    decode = ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "row", epilogue="bias,relu")
    swapped = sg.render(decode, sg.hero_schedule(decode, 132))
    assert "bias[row]" in swapped  # the kernel's rows are C's columns under swap
    _compiles_clean(swapped, "epilogue, swapped decode")


def test_two_product_sets_store_a_tile_while_the_next_ones_first_step_runs(nvrtc, monkeypatch):
    op = ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "row")
    src = sg.render(op, TILE)
    head = src.index("int ptm = -1")
    issued, stored = src.index("tr_wgmma(step_acc0", head), src.index("if (ptm >= 0)", head)
    assert issued < stored < src.index("TR_WGMMA_WAIT", head)  # issued, then the tile before stored, then awaited
    assert "if (k_iters >= 1) {" in src and src.count("} while (0);") == 2  # in the walk, and after it
    assert src.index("__ldg(scale_b + c)", stored) < src.index("tr_f2bf2(out[0], out[1])", stored)
    for form in (dataclasses.replace(TILE, split=2), W(bm=64, bn=128, stages=6, consumers=2, pingpong=True)):
        assert "int ptm" not in sg.render(op, form)  # split-K's units and ping-pong's turns walk as before
    op = ScaledGemm(4096, 4096, 4096, "fp8e4m3", "bf16", "block128")
    monkeypatch.setattr(sg, "BLOCK_AHEAD", 0)
    assert "int ptm" not in sg.render(op, TILE)  # block scales without the overlap (the probe's --ahead 0)
    monkeypatch.setattr(sg, "BLOCK_AHEAD", 1)
    blocks = sg.render(op, TILE)  # the first step's block scales loaded before the tile before is stored
    assert "int ptm" in blocks
    assert blocks.index("sa_k0[i >> 1][i & 1] = ", blocks.index("int ptm")) < blocks.index("if (ptm >= 0)")
    _compiles_clean(blocks, "block128 overlapped")


def test_the_planner_ranks_the_next_variant_where_the_kernel_refuses_the_op():
    """On a recorded H200 the Hopper variant is chosen for what it computes; for an op its kernels refuse (B k x n,
    int8 with block scales) it is rejected with the kernel's reason and the CPU's int8 variant is chosen, or, for
    FP8, nothing (the reason said)."""
    from pathlib import Path

    from tracea.doctor.plan import plan
    from tracea.doctor.snapshot import read_snapshot
    from tracea.emitters import cpu, cuda

    host, _ = read_snapshot(Path(__file__).parents[3] / "tests/fixtures/snapshots/h200_live.json")
    variants = cuda.VARIANTS + cpu.VARIANTS

    def decide(**kw):
        d = plan(ScaledGemm(256, 256, 256, **kw), host, variants)
        return d.chosen, {c.variant: c.reasons for c in d.candidates}

    chosen, _ = decide(dtype="fp8e4m3", out_dtype="bf16", scale="row")
    assert chosen == "cuda-wgmma.scaled_gemm"
    chosen, why = decide(dtype="int8", out_dtype="fp32", scale="row", layout_b="row")
    assert chosen.startswith("cpu-") and "K-major" in why["cuda-wgmma.scaled_gemm"][-1]
    chosen, why = decide(dtype="int8", out_dtype="fp32", scale="block128")
    assert chosen.startswith("cpu-") and "block scales" in why["cuda-wgmma.scaled_gemm"][-1]
    chosen, why = decide(dtype="fp8e4m3", out_dtype="fp32", scale="row", layout_b="row")
    assert chosen is None and "K-major" in why["cuda-wgmma.scaled_gemm"][-1]
    assert plan(ScaledGemm(256, 256, 256, "fp8e4m3", "fp32", "row", layout_b="row"), host, variants).precision is None
    from tracea.emitters.registry import default_backend

    backend, sentence = default_backend(ScaledGemm(256, 256, 256, "fp8e4m3", "fp32", "row", layout_b="row"), host,
                                        runs_here=False)
    assert backend == "cpu" and "no variant can run it here (cuda: B is k x n" in sentence  # the GPU's reason said
    assert sg.refusal(ScaledGemm(256, 256, 264 + 4, "fp8e4m3", "bf16", "row")).startswith("k = 268")


def test_an_fp8_output_is_staged_or_stored_directly_and_writes_its_amax_once_a_launch():
    """hopper/fp8_out.py in the rendered kernel: the TMA store of byte pairs on unswapped 128-column multiples (refused
    elsewhere), the hero staged; the direct stores:
    two values a cvt (its first source the high byte: PTX's order), the amax raised before scale_out, and the last
    warp of the launch writing it and leaving its scratch zero."""
    from tracea.emitters.cuda import gemv_tma_fp8

    op = ScaledGemm(256, 384, 512, "fp8e4m3", "fp8e4m3", "row", epilogue="bias")
    swap = W(bm=64, bn=16, stages=8, consumers=1, swap=True, store="tma")
    for refused in (W(bm=128, bn=192, stages=4, consumers=2, store="tma"), swap):
        with pytest.raises(BadInputError, match="TMA store stages 16-bit C"):
            sg.check(op, refused)
    hero = sg.hero_schedule(op)
    assert hero.store == "tma" and hero.bn == 128  # staged as byte pairs
    assert all(s.store == "direct" or s.bn % 128 == 0 for s in sg.search_space_scaled(op))
    staged = sg.render(op, hero)
    assert "st.shared.b16 [%0], %1" in staged and "tr_tma_store_2d(&tmC, (tn * 128 + a * 128) / 2" in staged
    assert "if (inside) amax_t = max(amax_t, __float_as_uint(fabsf(v)));" in staged
    src = sg.render(op, dataclasses.replace(hero, store="direct"))
    assert "cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\" : \"=h\"(d) : \"f\"(hi), \"f\"(lo)" in src
    raise_at, scale_at = src.index("amax_t = max(amax_t, __float_as_uint(fabsf(v)));"), src.index("v *= so;")
    assert raise_at < scale_at and "const uint16_t* __restrict__ bias" in src  # bf16 operands beside an FP8 C
    assert "amax[0] = __uint_as_float(atomicExch(amax_ws, 0u));" in src and "atomicExch(amax_ws + 1, 0u);" in src
    assert "== (gridDim.x * gridDim.y * gridDim.z * 8u) - 1u" in src  # 2 consumers x 4 warps arrive a block
    assert "__shfl_xor_sync(0xffffffffu, send, r)" in src and "*(unsigned long long*)p = line;" in src  # 8 bytes a lane
    assert sg.params_of(op)[-7:-4] == ("scale_out", "amax", "amax_ws")
    e5 = sg.render(ScaledGemm(1, 4096, 4096, "fp8e4m3", "fp8e5m2", "tensor"), sg.hero_schedule(
        ScaledGemm(1, 4096, 4096, "fp8e4m3", "fp8e5m2", "tensor")))
    assert "e5m2x2" in e5 and "C[(int64_t)col * M + row] = (unsigned char)tr_fp8x2(v, 0.0f);" in e5  # swapped
    assert gemv_tma_fp8.refusal(ScaledGemm(1, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor")) is None
    plain = sg.render(ScaledGemm(256, 384, 512, "fp8e4m3", "bf16", "row"), TILE)
    assert "amax" not in plain and "tr_fp8x2" not in plain  # other outputs keep the kernel they had


@pytest.mark.parametrize("form,ends", [({}, "gridDim.x * gridDim.y"), ({"splits": 4}, "gridDim.x * gridDim.y"),
                                       ({"splits": 11}, "gridDim.x")])
def test_the_gemv_stores_an_fp8_output_and_counts_the_blocks_that_end(nvrtc, form, ends):
    """FP8 decode into an FP8 C on the TMA gemv (gemv_tma_fp8._fp8_c): each element raises the amax then is
    quantized; every warp of the blocks that reach the end counts in (a workspace split's other blocks leave after
    parking their partials: one block a column tile ends; unsplit and cluster forms all end); no spills (the scale
    and the amax live only from the reduction on). 8 rows: at 16, NVRTC 13.5's ptxas spills 12 bytes in this gemv
    with any output (bf16 too; 13.0, the H200 runs', compiles it clean and its GPU tests assert so)."""
    from tracea.emitters.cuda import gemv_tma
    from tracea.emitters.cuda.arch import parse_arch

    op = ScaledGemm(8, 4096, 11008, "fp8e4m3", "fp8e4m3", "row", epilogue="bias")
    r = gemv_tma.render_gemv_tma(op, gemv_tma.GemvTmaSchedule(**form), parse_arch("sm_90a"))
    assert f"== (({ends}) * (blockDim.x / 32u)) - 1u" in r.source
    assert "amax_t = max(amax_t, __float_as_uint(fabsf(v)));" in r.source and "TR_FP8Q(" in r.source
    assert r.params[-5:-2] == ("scale_out", "amax", "amax_ws")
    _compiles_clean(r.source, r.name)
