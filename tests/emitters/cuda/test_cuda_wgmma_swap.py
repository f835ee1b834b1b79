"""The Hopper GEMM with swapped operands (``WgmmaSchedule.swap``) without a GPU: the schedule's checks and JSON,
the kernel op it computes, the epilogue's transposed addressing in the source, NVRTC compiles for sm_90a without
spills, the hero rule of few-pixel 1x1 convs and the exporter's refusal (the NumPy model of the maps over a conv's
buffers is in test_cuda_wgmma_conv1x1.py). The GPU run is tests/emitters/cuda/test_cuda_wgmma_swap_gpu.py."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters.cuda.hopper import conv1x1, gemm
from tracea.emitters.cuda.hopper.conv_paths import gemm_view
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule
from tracea.kernels import Conv2d, Gemm

SWAP = WgmmaSchedule(bm=64, bn=16, stages=6, consumers=1, store="tma", swap=True)


def one(n=1, c=64, h=7, k=256, dtype="fp16", **kw) -> Conv2d:
    return Conv2d(n=n, c=c, h=h, w=h, k=k, r=1, s=1, layout="nhwc", dtype=dtype, **kw)


def test_the_schedule_checks_what_a_swapped_kernel_takes():
    linear = Gemm(16, 4096, 4096, "bf16", layout_b="col")
    SWAP.validate(linear)
    for bn in (8, 24, 56, 64):
        dataclasses.replace(SWAP, bn=bn).validate(linear)
    for bad, why in ((dataclasses.replace(SWAP, bn=12), "multiple of 8"), (dataclasses.replace(SWAP, bn=72), "up to 64"),
                     (dataclasses.replace(SWAP, cluster=2), "clusters"),
                     (dataclasses.replace(SWAP, bm=128, consumers=2, pingpong=True), "ping-pong"),
                     (dataclasses.replace(SWAP, split=2, split_fix="spread"), "spread"),
                     (dataclasses.replace(SWAP, swap=1), "swap")):
        with pytest.raises(BadInputError, match=why):
            bad.validate(linear)
    with pytest.raises(BadInputError, match="K-major"):
        SWAP.validate(Gemm(16, 4096, 4096, "bf16"))  # B row-major: n contiguous
    with pytest.raises(BadInputError, match="bn"):
        dataclasses.replace(SWAP, swap=False).validate(linear)  # 16 columns only swapped
    assert "swap" not in WgmmaSchedule().to_json() and WgmmaSchedule.from_json(SWAP.to_json()) == SWAP
    assert SWAP.name.endswith("_sw")
    conv = WgmmaConvSchedule.of_gemm(SWAP)
    assert conv.swap and WgmmaConvSchedule.from_json(conv.to_json()) == conv
    conv.validate(one())
    with pytest.raises(BadInputError, match="gemm path"):
        dataclasses.replace(conv, path="im2col").validate(Conv2d(1, 64, 9, 9, 64, 3, 3, padding=1, layout="nhwc",
                                                                 dtype="fp16"))


def test_the_kernel_computes_c_transposed_over_the_exchanged_extents():
    op = Gemm(16, 1000, 520, "fp16", layout_b="col", epilogue=("bias", "gelu"), alpha=0.5)
    kop = gemm.kernel_op(op, SWAP)
    assert (kop.m, kop.n, kop.k, kop.layout_a, kop.layout_b, kop.epilogue, kop.alpha) == \
        (1000, 16, 520, "row", "col", ("bias", "gelu"), 0.5)
    assert gemm.kernel_op(op, dataclasses.replace(SWAP, swap=False, bn=64)) is op
    grid, threads, _ = gemm.launch_geometry(op, SWAP, 132)
    assert grid == -(-1000 // 64) * -(-16 // 16) and threads == 256  # tiles of C^T, persistent
    assert gemm.rendered(op, SWAP, 132).metadata["swapped"]["computes"] == "C^T (1000 x 16) = B^T A^T"


def test_the_epilogue_writes_c_transposed():
    op = Gemm(40, 264, 328, "bf16", layout_b="col", epilogue=("bias", "residual"))
    tma_src = gemm.render(op, SWAP)
    direct = gemm.render(op, dataclasses.replace(SWAP, store="direct"))
    assert "m64n16k16" in tma_src and "C^T stored transposed" in tma_src
    assert "bias[row]" in tma_src and "residual[(int64_t)col * M + row]" in tma_src and "bias[col]" not in tma_src
    assert "tr_tma_store_2d(&tmC, tm * 64 + part * 64 + i * 64, tn * 16, buf);" in tma_src
    assert "st.shared.b16" in tma_src
    assert "C[(int64_t)col * M + row] =" in direct and "bias[row]" in direct


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    return find_nvrtc()


@pytest.mark.parametrize("sched", [SWAP, dataclasses.replace(SWAP, bn=8, store="direct"),
                                   dataclasses.replace(SWAP, bn=56, split=0),
                                   dataclasses.replace(SWAP, bm=128, consumers=2, bn=32)], ids=lambda s: s.name)
def test_swapped_kernels_compile_for_sm90a_without_spills(nvrtc, sched):
    from tracea.emitters.nvrtc import compile_with_report, options_for

    op = Gemm(16, 4096, 4096, "bf16", layout_b="col", epilogue=("bias", "gelu", "residual"))
    src = gemm.render(op, sched)
    _, log = compile_with_report(src, "swap.cu", None, options_for("sm_90a"))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert m and m.groups() == ("0", "0", "0"), log[-400:]


def test_the_exporter_refuses_a_swapped_schedule():
    from tracea.emitters.cuda.export_maps import tensor_maps

    op = Gemm(16, 4096, 4096, "bf16", layout_b="col")
    with pytest.raises(UnsupportedError, match="swap"):
        tensor_maps(op, gemm.rendered(op, SWAP, 132), SWAP)


def test_the_conv_path_renders_the_gemm_kernel_of_its_view():
    op = one(c=2048, k=512)
    sched = WgmmaConvSchedule.of_gemm(SWAP)
    assert conv1x1.render(op, sched) == gemm.render(gemm_view(op), SWAP)


def test_few_pixel_1x1_convs_over_many_channels_swap_their_operands():
    """ResNet-50's batch-1 1x1 convs of 784 pixels or fewer over 256+ channels: 64 x 32 swapped tiles, 16 pixels
    where 32 leave under 40 tiles, and split-K over 32+ k steps; the rest keep the GEMM's hero."""
    from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule

    want = {(512, 28, 128): (32, 1), (512, 28, 256): (32, 1), (256, 14, 1024): (32, 1), (1024, 14, 256): (16, 1),
            (1024, 14, 512): (32, 1), (512, 7, 2048): (32, 1), (2048, 7, 512): (16, 0)}
    for (c, h, k), (bn, split) in want.items():
        s = conv_hero_schedule(one(c=c, h=h, k=k))
        assert (s.swap, s.bn, s.split, s.bm, s.stages, s.store) == (True, bn, split, 64, 8, "tma"), (c, h, k, s)
        s.validate(one(c=c, h=h, k=k))
    for op in (one(c=128, h=28, k=512), one(c=64, h=56, k=256), one(n=32, c=2048, h=7, k=512), one(c=4096, h=29, k=64)):
        assert not conv_hero_schedule(op).swap
