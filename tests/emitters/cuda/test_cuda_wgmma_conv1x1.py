"""1x1 convolutions as a plain GEMM on Hopper (cuda-wgmma.conv2d, path "gemm"), without a GPU: which
convs take the GEMM path (ResNet-50's stride-1 1x1 convs do; stride-2 downsamples, padded or larger
filters, NCHW and unaligned channels keep the gather), that the path renders the GEMM core's kernel byte
for byte, the tensor maps over x, the filter and the output (checked by a NumPy model of the TMA boxes
that recomputes the conv from them), and NVRTC compiles for sm_90a. The GPU run is
tests/emitters/cuda/test_cuda_conv1x1.py."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda import tma
from tracea.emitters.cuda.hopper import conv as WC
from tracea.emitters.cuda.hopper import conv1x1, conv_heroes, gemm
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule
from tracea.emitters.cuda.hopper.conv_paths import gemm_view, gemm_view_unsupported
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.emitters.cuda.hopper.schedule import BK, WgmmaSchedule, hero_schedule
from tracea.emitters.cuda.hopper.space import conv_search_space, search_space
from tracea.kernels import Conv2d, Gemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

# ResNet-50's 1x1 convs (torchvision, stride on the 3x3): (C, K, H) at stride 1, and the stride-2 downsamples
RESNET_1X1 = [(64, 64, 56), (64, 256, 56), (256, 64, 56), (256, 128, 56), (128, 512, 28), (512, 128, 28),
              (512, 256, 28), (256, 1024, 14), (1024, 256, 14), (1024, 512, 14), (512, 2048, 7), (2048, 512, 7)]
RESNET_1X1_S2 = [(256, 512, 56), (512, 1024, 28), (1024, 2048, 14)]


def one(n=1, c=64, h=56, k=256, dtype="fp16", **kw) -> Conv2d:
    return Conv2d(n=n, c=c, h=h, w=kw.pop("w", h), k=k, r=1, s=1, layout=kw.pop("layout", "nhwc"), dtype=dtype, **kw)


# ------------------------------------------------------------------------------------------ routing


# the tiles pingpong_1x1 gives ResNet-50's stride-1 1x1 convs that are not swapped ("gemm": the GEMM's own hero):
# at batch 32 chosen by which of 64 x 128 and 128 x 128 fills its waves better (docs/device-runs/h200-conv1x1-tune/)
PICKS = {(1, 64, 64, 56): "gemm", (1, 64, 256, 56): "pp64", (1, 256, 64, 56): "gemm", (1, 256, 128, 56): "gemm",
         (1, 128, 512, 28): "gemm", (32, 64, 64, 56): "gemm", (32, 64, 256, 56): "pp128", (32, 256, 64, 56): "gemm",
         (32, 256, 128, 56): "pp128", (32, 128, 512, 28): "pp128", (32, 512, 128, 28): "gemm",
         (32, 512, 256, 28): "pp128", (32, 256, 1024, 14): "pp128", (32, 1024, 256, 14): "pp128",
         (32, 1024, 512, 14): "gemm", (32, 512, 2048, 7): "pp128", (32, 2048, 512, 7): "pp64"}


@pytest.mark.parametrize("n", [1, 32])
@pytest.mark.parametrize("c,k,h", RESNET_1X1)
def test_resnet_stride1_1x1_convs_take_the_gemm_path(c, k, h, n):
    op = one(n=n, c=c, h=h, k=k, bias=n == 1)
    assert gemm_view_unsupported(op) is None
    hero = conv_hero_schedule(op)
    swapped = n * h * h <= 784 and c >= 256  # few pixels over many channels: swapped operands (swapped_1x1)
    assert hero.path == "gemm" and hero.swap == swapped
    want = {"gemm": WgmmaConvSchedule.of_gemm(hero_schedule(gemm_view(op))), "pp64": conv_heroes.PP64,
            "pp128": conv_heroes.PP128}
    assert swapped or hero == want[PICKS[n, c, k, h]]
    hero.validate(op)
    assert gemm_view(op) == Gemm(m=n * h * h, n=k, k=c, dtype="fp16", layout_a="row", layout_b="col",
                                 epilogue=("bias",) if n == 1 else ())


def test_swapped_tiles_past_one_wave_take_the_pingpong_tiles():
    """Batches 2-16 of few pixels over many filters: swapped tiles past one wave of 132 SMs lost on every shape the
    H200 ran (0.54-0.99x cuDNN); the ping-pong tiles or unsplit 64 x 128 ones take them. Within one wave, swapped."""
    cases = {(16, 2048, 512, 7): conv_heroes.NARROW_1X1,  # 392 swapped tiles; 64 x 128: 52 tiles, 32 k steps
             (8, 512, 2048, 7): conv_heroes.PP64,  # 416 swapped; 64 x 128 fill 112 of 132 SMs, 128 x 128 64
             (16, 512, 2048, 7): conv_heroes.PP128,  # 112 tiles of 128 x 128 against 208 of 64 x 128
             (4, 384, 1536, 14): conv_heroes.PP128}
    for (n, c, k, h), want in cases.items():
        op = one(n=n, c=c, h=h, k=k)
        assert conv_heroes.swapped_1x1(op) is None and conv_hero_schedule(op) == want, (n, c, k, h)
        want.validate(op)
    for n, c, k, h in ((2, 512, 2048, 7), (4, 1024, 256, 14), (1, 256, 1024, 14)):  # 128, 100, 112 tiles
        assert conv_hero_schedule(one(n=n, c=c, h=h, k=k)).swap
    # on a GPU of fewer SMs the same conv leaves the swap
    assert not conv_hero_schedule(one(n=1, c=256, h=14, k=1024), sm_count=66).swap


def test_rows_off_lines_take_pairs_sharing_the_filter():
    """off_line_1x1: 1x1 convs whose C or K is no multiple of 64 (rows off 128-byte lines) run in 2-block clusters
    multicasting the filter's boxes; the picks the H200 measured fastest (docs/device-runs/h200-odd-channels/call4)."""
    wide, pair = conv_heroes.OFF_LINE_WIDE, conv_heroes.OFF_LINE_PAIR
    cases = {(64, 440, 440, 28): wide,  # 784 tiles of 128 x 256: as few turns as 1568 of 128 x 128
             (64, 888, 888, 14): wide, (64, 40, 240, 56): wide,  # one k step, but 12 waves of 128 x 256 tiles
             (16, 696, 696, 14): wide,  # 75 tiles of 128 x 256 in one turn, 150 of 128 x 128 in two
             (64, 440, 440, 14): pair,  # 196 wide tiles (two turns) against 392 square ones (three)
             (64, 216, 576, 28): pair,  # 576 filters: 256-wide tiles spend 768 columns
             (64, 1512, 1512, 7): pair,  # pingpong_1x1's 64 x 128 tiles before (0.48x cuDNN; the pair 0.73x)
             (16, 440, 440, 14): conv_heroes.PP128,  # 100 square tiles: under two waves, the pick stays
             (16, 80, 480, 28): conv_heroes.PP128,  # 2 k steps and under two waves of wide tiles
             (64, 888, 888, 7): WgmmaConvSchedule.of_gemm(hero_schedule(gemm_view(one(n=64, c=888, h=7, k=888))))}
    for (n, c, k, h), want in cases.items():
        op = one(n=n, c=c, h=h, k=k)
        assert conv_hero_schedule(op) == want, (n, c, k, h, conv_hero_schedule(op).name)
        want.validate(op)
    assert wide.cluster == pair.cluster == 2 and wide.cluster_axis == pair.cluster_axis == "m"
    # rows on lines keep pingpong_1x1's tiles, at every batch and width of ResNet-50's and others
    for n in (8, 16, 32, 64):
        for c, k, h in (*RESNET_1X1, (448, 448, 28), (1280, 320, 7), (576, 1152, 14)):
            op = one(n=n, c=c, h=h, k=k)
            assert conv_hero_schedule(op) == (conv_heroes.swapped_1x1(op) or conv_heroes.pingpong_1x1(op))


def test_few_narrow_tiles_keep_small_tiles():
    """Where 64 x 128 tiles fill at most half the SMs: the GEMM's 64 x 64 tiles over a K of 16 steps or fewer,
    unsplit 64 x 128 over a longer one (never the GEMM's split 128 x 256 tiles: n32 c1536 7x7 k384 ran 0.46x cuDNN on them)."""
    small = one(n=2, c=512, h=28, k=256)  # 50 tiles of 64 x 128
    assert conv_hero_schedule(small) == WgmmaConvSchedule.of_gemm(hero_schedule(gemm_view(small)))
    assert (conv_hero_schedule(small).bm, conv_hero_schedule(small).bn) == (64, 64)
    assert conv_hero_schedule(one(n=8, c=2048, h=7, k=1024)) == conv_heroes.NARROW_1X1  # 56 tiles, 32 k steps
    odd = one(n=32, c=1536, h=7, k=384)  # 75 tiles of 64 x 128: whole-wave share 0.57 against 0.30 for 128 x 128
    assert hero_schedule(gemm_view(odd)).split != 1 and conv_hero_schedule(odd) == conv_heroes.PP64


@pytest.mark.parametrize("c,k,h", RESNET_1X1_S2)
def test_stride2_downsamples_take_tma_im2col(c, k, h):
    op = one(n=32, c=c, h=h, k=k, stride=2)
    assert "stride" in gemm_view_unsupported(op)
    assert conv_hero_schedule(op).path == "im2col"  # TMA walks the strided pixels; not a plain GEMM
    assert {s.path for s in conv_search_space(op)} == {"gather", "im2col"}


@pytest.mark.parametrize("op,why", [
    (one(padding=1), "padding"), (one(layout="nchw"), "layout"), (one(c=60), "C = 60"), (one(k=100), "K = 100"),
    (Conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, layout="nhwc", dtype="fp16"), "3x3"),
    (Conv2d(1, 64, 56, 56, 64, 1, 3, padding=(0, 1), layout="nhwc", dtype="fp16"), "1x3"),
    (one(groups=2), "groups"), (one(dtype="fp32"), "dtype"), (Gemm(64, 64, 64, "fp16"), "conv2d"),
])
def test_other_convs_are_not_a_plain_gemm(op, why):
    assert why in gemm_view_unsupported(op)
    if op.kind == "conv2d" and op.dtype.value != "fp32" and op.groups == 1:
        assert conv_hero_schedule(op).path == "im2col"
        with pytest.raises(BadInputError, match="path"):
            WgmmaConvSchedule.of_gemm(WgmmaSchedule()).validate(op)


def test_dilation_does_not_move_a_1x1_filter():
    op = one(c=64, k=64, dilation=2)
    assert op.p == op.h and gemm_view_unsupported(op) is None and conv_hero_schedule(op).path == "gemm"


def test_gemm_path_schedule_json_validation_and_space():
    op = one(n=2, c=256, h=56, k=64, bias=True)
    space = conv_search_space(op)
    hero = conv_hero_schedule(op)
    assert space[0] == hero and hero.name.endswith("_gemm") and hero.name.startswith("conv_wgmma_")
    gemm_part = [s for s in space if s.path == "gemm"]
    # the GEMM's whole space for the view, clusters and 2-stage rings included (but the pairs along N,
    # which the conv does not take), then the gather's
    assert [s.as_gemm() for s in gemm_part] == [g for g in search_space(gemm_view(op)) if g.cluster_axis == "m"]
    assert any(s.cluster == 2 for s in gemm_part) and any(s.path == "gather" for s in space)
    assert space.index(gemm_part[-1]) < min(i for i, s in enumerate(space) if s.path == "gather")
    for s in space[:: max(1, len(space) // 11)]:
        assert WgmmaConvSchedule.from_json(s.to_json()) == s
        assert ("path" in s.to_json()) == (s.path != "gather")  # a gather schedule's JSON is as before
    with pytest.raises(BadInputError, match="publish"):
        WgmmaConvSchedule(path="gemm", publish="noinc").validate(op)
    with pytest.raises(BadInputError, match="path"):
        WgmmaConvSchedule(path="tma").validate(op)
    WgmmaConvSchedule(path="gemm", cluster=2, stages=2, bn=128).validate(op)  # the GEMM's limits, not the gather's


def test_gemm_path_renders_the_gemm_cores_kernel_byte_for_byte():
    from pathlib import Path

    from tracea.doctor.snapshot import read_snapshot
    from tracea.emitters import cuda
    from tracea.emitters.cuda.arch import target_host, target_of
    from tracea.emitters.cuda.build import render

    host, _ = read_snapshot(Path(__file__).parents[2] / "fixtures/snapshots/h100_live.json")
    arch = target_of(target_host(host, "sm_90a"), "sm_90a")
    for op in (one(n=2, c=256, h=56, k=64, bias=True), one(n=1, c=2048, h=7, k=512, dtype="bf16"),
               one(n=2, c=128, h=28, k=512)):
        sched = cuda.hero_schedule(op, "cuda-wgmma.conv2d", host, arch=arch)
        view = gemm_view(op)
        r, _ = render(op, sched, arch)
        g, _ = render(view, sched.as_gemm(), arch)  # the same fields (pingpong_1x1's tiles, or swapped: c2048 7x7)
        assert sched == conv_hero_schedule(op)
        assert (r.source, r.entry, r.params, r.grid, r.block, r.smem, r.name) == \
            (g.source, g.entry, g.params, g.grid, g.block, g.smem, g.name)
        assert r.metadata["conv_as_gemm"]["M"] == op.gemm_m and r.entry == gemm.KERNEL_NAME
        assert WC.render(op, sched) == r.source


# ------------------------------------------------------------------------- tensor maps (NumPy model)


def _encoded(monkeypatch, op, sched):
    """The (dims, byte strides, box) tma.py encodes for x, the filter and the output of the gemm path."""
    calls = []
    monkeypatch.setattr(tma, "encode_tiled", lambda ptr, dtype, dims, strides, box: calls.append(
        {"ptr": ptr, "dtype": dtype, "dims": tuple(dims), "strides": tuple(strides), "box": tuple(box)}) or tma._Map())
    view, gs = gemm_view(op), sched.as_gemm()
    tma.operand_maps(view, gs, 0x1000, 0x2000)
    _, store_tma = tma.output_map(view, gs, 0x3000)
    return calls, store_tma


def _box(flat, dims, strides_elems, box, coords):
    """A TMA box read: ``box`` elements from ``coords`` (innermost first), zero outside ``dims``."""
    out = np.zeros(box[::-1])
    for j in range(box[1]):
        row = coords[1] + j
        for i in range(box[0]):
            col = coords[0] + i
            if row < dims[1] and col < dims[0]:
                out[j, i] = flat[row * strides_elems[0] + col]
    return out


@pytest.mark.parametrize("store", ["tma", "direct"])
def test_tensor_maps_over_the_conv_buffers_compute_the_conv(monkeypatch, store):
    """Rows of C (72: a k tail) and K (80: a partial bn tile) and M = 49 (one partial 64-row tile): each
    tile assembled from the encoded boxes over the flat NHWC buffers, k step by k step, then stored
    through the output map, equals the conv's float64 reference."""
    op = one(n=1, c=72, h=7, k=80, bias=True)
    sched = WgmmaConvSchedule(bm=64, bn=64, stages=4, consumers=1, store=store, path="gemm")
    sched.validate(op)
    (ma, mb, *mc), store_tma = _encoded(monkeypatch, op, sched)
    c, k, m = op.c, op.k, op.gemm_m
    assert (ma["ptr"], ma["dims"], ma["strides"], ma["box"]) == (0x1000, (c, m), (c * 2,), (BK, sched.bm))
    assert (mb["ptr"], mb["dims"], mb["strides"], mb["box"]) == (0x2000, (c, k), (c * 2,), (BK, sched.bn))
    assert conv1x1.tma_boxes(op, sched) == {"a": {"dims": (c, m), "box": (BK, 64), "kmajor": True},
                                            "b": {"dims": (c, k), "box": (BK, 64), "kmajor": True}}
    if store == "tma":
        assert store_tma == 1 and mc[0]["dims"] == (k, m) and mc[0]["strides"] == (k * 2,) and mc[0]["box"] == (64, 64)
    else:
        assert store_tma == 0 and not mc
    inputs = op.random_inputs(np.random.default_rng(3))
    x, w = to_float64(inputs["x"], op.dtype).ravel(), to_float64(inputs["weight"], op.dtype).ravel()
    bias = to_float64(inputs["bias"], op.dtype)
    out = np.full(m * k, np.nan)
    for m0 in range(0, m, sched.bm):
        for n0 in range(0, k, sched.bn):
            acc = np.zeros((sched.bm, sched.bn))
            for k0 in range(0, c, BK):  # the kernel's k loop: ceil(K / 64) boxes, TMA zero-fills the tail
                a = _box(x, ma["dims"], (ma["strides"][0] // 2,), ma["box"], (k0, m0))
                b = _box(w, mb["dims"], (mb["strides"][0] // 2,), mb["box"], (k0, n0))
                acc += a @ b.T  # b is the K-major box: bn lines of 64 channels
            acc += np.pad(bias, (0, sched.bn))[n0:n0 + sched.bn]
            for j in range(min(sched.bm, m - m0)):  # the store clips at M and N
                cols = min(sched.bn, k - n0)
                out[(m0 + j) * k + n0:(m0 + j) * k + n0 + cols] = acc[j, :cols]
    ref = op.reference(inputs)
    assert ref.shape == (1, 7, 7, k) and not np.isnan(out).any()
    assert relative_error(out.reshape(ref.shape), ref) <= 1e-12 < tolerance(op)


@pytest.mark.parametrize("bn", [8, 16, 24])
def test_the_maps_over_the_conv_buffers_compute_the_conv_transposed(monkeypatch, bn):
    """M = 35 pixels (partial bn tiles), K = 80 (a partial 64-row tile of C^T), C = 72 (a k tail): the kernel's A
    map is the filter's, its B map x's, C's map takes boxes of 64 channels x bn pixels; each C^T tile built from
    the boxes k step by k step, the bias along its rows, then written through C's map transposed, equals the
    conv's float64 reference."""
    op = Conv2d(1, 72, 5, 7, 80, 1, 1, layout="nhwc", dtype="fp16", bias=True)
    sched = WgmmaConvSchedule(bm=64, bn=bn, stages=4, consumers=1, store="tma", swap=True, path="gemm")
    sched.validate(op)
    (ma, mb, mc), store_tma = _encoded(monkeypatch, op, sched)
    c, k, m = op.c, op.k, op.gemm_m
    assert (ma["ptr"], ma["dims"], ma["box"]) == (0x2000, (c, k), (BK, 64))  # the filter: C^T's rows
    assert (mb["ptr"], mb["dims"], mb["box"]) == (0x1000, (c, m), (BK, bn))  # x: C^T's columns
    assert store_tma == 1 and (mc["ptr"], mc["dims"], mc["box"]) == (0x3000, (k, m), (64, bn))
    assert ma["strides"] == mb["strides"] == (c * 2,) and mc["strides"] == (k * 2,)
    inputs = op.random_inputs(np.random.default_rng(5))
    x, w = to_float64(inputs["x"], op.dtype).ravel(), to_float64(inputs["weight"], op.dtype).ravel()
    bias = to_float64(inputs["bias"], op.dtype)
    out = np.full(m * k, np.nan)
    for m0 in range(0, k, sched.bm):  # the kernel's tiles: rows over the filters, columns over the pixels
        for n0 in range(0, m, bn):
            acc = np.zeros((sched.bm, bn))
            for k0 in range(0, c, BK):
                a = _box(w, ma["dims"], (c,), ma["box"], (k0, m0))
                b = _box(x, mb["dims"], (c,), mb["box"], (k0, n0))
                acc += a @ b.T
            acc += np.pad(bias, (0, sched.bm))[m0:m0 + sched.bm, None]  # bias[row]
            staged = acc.T  # the staging block: bn rows of C (pixels) x 64 columns (channels)
            for j in range(bn):  # the store through C's map: box (64, bn) at (m0, n0), clipped at C's edges
                if n0 + j < m:
                    cols = min(64, k - m0)
                    out[(n0 + j) * k + m0:(n0 + j) * k + m0 + cols] = staged[j, :cols]
    ref = op.reference(inputs)
    assert not np.isnan(out).any()
    assert relative_error(out.reshape(ref.shape), ref) <= 1e-12 < tolerance(op)


def test_cluster_pairs_split_the_filter_box(monkeypatch):
    op = one(n=2, c=256, h=28, k=512)
    sched = WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, cluster=2, store="tma", path="gemm")
    (_, mb, mc), _ = _encoded(monkeypatch, op, sched)
    assert mb["box"] == (BK, 128) and mb["dims"] == (256, 512) and mc["dims"] == (512, op.gemm_m)


# ------------------------------------------------------------------------------------------ NVRTC


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    find_nvrtc()
    import os

    os.environ.setdefault("TRACEA_HOME", str(tmp_path_factory.mktemp("home")))
    from tracea.emitters.cuda.build import compile_kernel

    class NoGpu:
        nvidia = None

    def run(op: Conv2d, sched: WgmmaConvSchedule):
        return compile_kernel(op, "cuda-wgmma.conv2d", sched, NoGpu(), "sm_90a")

    return run


@pytest.mark.parametrize("op", [one(n=2, c=512, h=28, k=256), one(n=1, c=256, h=56, k=64, dtype="bf16", bias=True),
                                one(n=1, c=2048, h=7, k=512, bias=True)], ids=lambda o: o.signature[:48])
def test_gemm_path_heroes_compile_for_sm90a_without_spills(compiled, op):
    """The three GEMM heroes the ResNet rows get: 128 x 256 TMA store, 128 x 128 (K <= 128), 64 x 64 (M = 49)."""
    hero = conv_hero_schedule(op)
    _, r, _, art = compiled(op, hero)
    res, log = art.metadata["resources"], art.metadata["compile_log"]
    assert r.entry == "tr_wgmma_gemm" and "sm_90a" in log and "C7508" not in log
    assert (res["spills"], res["spill_stores"], res["spill_loads"], res["stack_frame"]) == (0, 0, 0, 0), log
    assert art.schedule["path"] == "gemm" and art.metadata["conv_as_gemm"]["K"] == op.c
    assert res["regs_per_thread"] * hero.threads <= 65536  # the block launches


def test_a_cluster_schedule_of_the_space_compiles(compiled):
    op = one(n=2, c=128, h=28, k=512, dtype="bf16")
    sched = next(s for s in conv_search_space(op) if s.path == "gemm" and s.cluster == 2 and s.store == "tma")
    _, r, _, art = compiled(op, sched)
    assert "__cluster_dims__(2, 1, 1)" in r.source and art.metadata["resources"]["spills"] == 0


def test_a_swap_narrowed_past_one_wave_keeps_the_wider_swapped_tiles():
    """On fewer SMs: 16-pixel swapped tiles (under 40 of 32) that no longer fit one wave give way to the 32-pixel ones
    where those fit (n2 c512 14x14 k192: 39 tiles of 32 pixels, 75 of 16), and to no swap where neither does."""
    op = one(n=2, c=512, h=14, k=192)
    assert conv_heroes.swapped_1x1(op).bn == 16  # 132 SMs: 75 tiles fit
    assert conv_heroes.swapped_1x1(op, sm_count=66).bn == 32
    assert conv_heroes.swapped_1x1(op, sm_count=32) is None


def test_maps_over_rows_off_lines_promote_128_bytes(monkeypatch):
    """Maps with a stride that is no multiple of 128 bytes (440 channels: 880-byte rows) have box rows that straddle two
    lines; they take OFF_LINE_PROMOTION (256-byte promotion cost an H200 13 % there), maps on lines keep L2_PROMOTION.
    Every stride counts (a packed attention map's rows walk its second one); the encoders pass them all."""
    assert [tma.promotion_for(st) for st in (880, 1776, 192, 16)] == ["L2_128B"] * 4
    assert [tma.promotion_for(st) for st in (896, 128, 8192, 0)] == ["L2_256B"] * 4
    assert (tma.promotion_for(5120, 160), tma.promotion_for(), tma.promotion_for(256, 1024)) == \
        ("L2_128B", "L2_256B", "L2_256B")
    drv = pytest.importorskip("cuda.bindings.driver")
    seen = []

    def encode(*args):  # either encoder: the strides are the 5th argument, the promotion the one of its type
        seen.append((list(args[4]), next(a for a in args if isinstance(a, drv.CUtensorMapL2promotion))))
        return 0, drv.CUtensorMap()

    monkeypatch.setattr(drv, "cuTensorMapEncodeTiled", encode)
    monkeypatch.setattr(drv, "cuTensorMapEncodeIm2col", encode)
    tma._encode_tiled(0x1000, "fp16", (440, 64), (880,), (64, 128))
    tma._encode_tiled(0x1000, "bf16", (80, 4096, 32), (5120, 160), (64, 64, 1))
    tma._encode_tiled(0x1000, "bf16", (4096, 4096), (8192,), (64, 128))
    from tracea.emitters.cuda.hopper import im2col

    sched = WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", path="im2col")
    for c in (200, 256):
        im2col._encode_activation(Conv2d(2, c, 14, 14, 128, 3, 3, padding=1, layout="nhwc", dtype="fp16"), sched,
                                  0x1000)
    assert [int(x[0]) for x, _ in seen] == [880, 5120, 8192, 400, 512]
    p = drv.CUtensorMapL2promotion
    off, on = p.CU_TENSOR_MAP_L2_PROMOTION_L2_128B, p.CU_TENSOR_MAP_L2_PROMOTION_L2_256B
    assert [promo for _, promo in seen] == [off, off, on, off, on]
