"""The Hopper conv's im2col path (``emitters/cuda/hopper/im2col.py``): schedule values and the limits of
TMA's im2col mode without a GPU, NVRTC compiles for sm_90a, and on an sm_90 GPU every case verified
against the float64 reference on fresh random inputs: padding, stride, dilation and filter shapes that
differ between height and width (the corners and offsets are per dimension), channels that are not a
multiple of 64 or of 8, tiles that run across rows and images, NCHW, bias, split-K."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda.hopper.conv_paths import im2col_unsupported
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule, trimmed_steps
from tracea.emitters.cuda.hopper.space import conv_search_space
from tracea.kernels import Conv2d

I2C = WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", path="im2col")
CASES = [
    (Conv2d(2, 64, 30, 30, 96, 3, 3, padding=1, stride=2, layout="nhwc", dtype="fp16"), I2C),
    (Conv2d(3, 40, 13, 17, 72, 3, 5, padding=(1, 2), layout="nhwc", dtype="bf16", bias=True), I2C),
    (Conv2d(2, 20, 11, 9, 24, 5, 3, padding=(2, 0), stride=(1, 2), dilation=(2, 1), layout="nhwc", dtype="fp16"),
     WgmmaConvSchedule(bm=64, bn=64, stages=4, consumers=1, store="direct", path="im2col")),
    (Conv2d(1, 256, 14, 14, 256, 3, 3, padding=1, layout="nhwc", dtype="fp16", bias=True),
     WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", path="im2col", split=0)),
    (Conv2d(4, 128, 7, 7, 256, 3, 3, padding=1, layout="nhwc", dtype="bf16"),
     WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, raster="n", store="tma", path="im2col")),
    (Conv2d(2, 32, 16, 12, 48, 3, 3, padding=1, layout="nchw", dtype="fp16", bias=True),
     WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", path="im2col")),
]
# boxes of 32 and 16 channels (``chunk``) and tiles as wide as the filters: 27 boxes of 32 (the last stage's second
# past the walk); 40 channels as 3 boxes of 16 a tap on 40-wide tiles with bias; a 5x3 filter dilated, 3 k slices
# starting mid-tap; channels off 8 (C = 20, padded to 24: 2 boxes of 16 a tap, 18 boxes, the last stage of 4 with 2
# past the walk) in NCHW, strided; 96 channels on the TMA store with a 128-wide tile; then the zero k16 steps of a
# tap's last box skipped (``trim``): 96 channels (k16 steps 2-3 of box 1), 200 (208: steps 1-3 of box 3) over 3 k
# slices starting mid-tap, 84 (88 -> 96: steps 2-3 of box 1) in NCHW, 40 (one box: step 3)
CHUNKED = [
    (Conv2d(2, 96, 13, 11, 96, 3, 3, padding=1, layout="nhwc", dtype="fp16", bias=True),
     WgmmaConvSchedule(bm=128, bn=96, stages=6, consumers=2, pingpong=True, path="im2col", chunk=32)),
    (Conv2d(2, 40, 13, 11, 40, 3, 3, padding=1, layout="nhwc", dtype="bf16", bias=True),
     WgmmaConvSchedule(bm=256, bn=40, stages=4, consumers=2, path="im2col", chunk=16)),
    (Conv2d(1, 96, 9, 7, 160, 5, 3, padding=(4, 1), dilation=(2, 1), layout="nhwc", dtype="fp16"),
     WgmmaConvSchedule(bm=64, bn=160, stages=6, consumers=1, path="im2col", chunk=32, split=3)),
    (Conv2d(3, 20, 10, 9, 24, 3, 3, padding=1, stride=2, layout="nchw", dtype="bf16", bias=True),
     WgmmaConvSchedule(bm=64, bn=24, stages=4, consumers=1, path="im2col", chunk=16)),
    (Conv2d(2, 96, 13, 11, 128, 3, 3, padding=1, layout="nhwc", dtype="fp16"),
     WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", path="im2col", chunk=32)),
    (Conv2d(2, 96, 13, 11, 96, 3, 3, padding=1, layout="nhwc", dtype="fp16", bias=True),
     WgmmaConvSchedule(bm=256, bn=96, stages=4, consumers=2, path="im2col", trim=True)),
    (Conv2d(1, 200, 9, 7, 72, 5, 3, padding=(4, 1), dilation=(2, 1), layout="nhwc", dtype="bf16"),
     WgmmaConvSchedule(bm=64, bn=72, stages=6, consumers=1, path="im2col", trim=True, split=3)),
    (Conv2d(2, 84, 10, 9, 64, 3, 3, padding=1, stride=2, layout="nchw", dtype="fp16"),
     WgmmaConvSchedule(bm=128, bn=64, stages=6, consumers=2, pingpong=True, store="tma", path="im2col", trim=True)),
    (Conv2d(2, 40, 12, 11, 40, 3, 3, padding=1, layout="nhwc", dtype="fp16", bias=True),
     WgmmaConvSchedule(bm=192, bn=40, stages=5, consumers=3, path="im2col", trim=True)),
    (Conv2d(3, 112, 13, 11, 112, 3, 3, padding=1, layout="nhwc", dtype="bf16", bias=True),  # fitted_width's forms
     WgmmaConvSchedule(bm=128, bn=112, stages=6, consumers=2, pingpong=True, path="im2col")),
    (Conv2d(3, 80, 13, 11, 72, 3, 3, padding=1, layout="nhwc", dtype="fp16"),
     WgmmaConvSchedule(bm=192, bn=72, stages=5, consumers=3, path="im2col")),
]


def test_im2col_schedule_values_and_limits():
    assert I2C.name.endswith("_i2c") and WgmmaConvSchedule.from_json(I2C.to_json()) == I2C
    with pytest.raises(BadInputError, match="publish"):
        WgmmaConvSchedule(path="im2col", publish="noinc").validate()
    ok = Conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, layout="nhwc", dtype="fp16")
    assert im2col_unsupported(ok) is None
    assert "stride" in im2col_unsupported(Conv2d(1, 8, 64, 64, 8, 3, 3, stride=9, layout="nhwc", dtype="fp16"))
    wide = Conv2d(1, 8, 600, 600, 8, 3, 3, padding=130, layout="nhwc", dtype="fp16")
    assert "padding" in im2col_unsupported(wide)
    with pytest.raises(BadInputError, match="im2col"):
        I2C.validate(wide)
    assert any(s.path == "im2col" for s in conv_search_space(ok))


def test_chunked_schedule_values_and_limits():
    """Boxes of 32 or 16 channels: named, in the JSON only where not 64, on the im2col path only; widths of any
    multiple of 8 off the gemm path, stored directly unless a multiple of 64; the walk's stages and ``cblk``."""
    from tracea.emitters.cuda.hopper import conv

    s = CHUNKED[0][1]
    assert s.name.endswith("_i2c_k32") and s.to_json()["chunk"] == 32 and WgmmaConvSchedule.from_json(s.to_json()) == s
    assert "chunk" not in I2C.to_json() and I2C.chunks_per_step == 1 and s.chunks_per_step == 2
    for op, sched in CHUNKED:
        sched.validate(op)
    with pytest.raises(BadInputError, match="chunk"):
        WgmmaConvSchedule(chunk=32).validate()  # the gather path
    for bad in (8, 32.0, True, "32"):
        with pytest.raises(BadInputError, match="chunk"):
            WgmmaConvSchedule(path="im2col", chunk=bad).validate()
    with pytest.raises(BadInputError, match="chunk"):
        WgmmaConvSchedule(path="gemm", bn=128, chunk=32).validate()
    with pytest.raises(BadInputError, match="store"):
        WgmmaConvSchedule(path="im2col", bn=96, store="tma").validate()
    with pytest.raises(BadInputError, match="multiple of 8"):
        WgmmaConvSchedule(path="im2col", bn=100).validate()
    with pytest.raises(BadInputError, match="bn"):
        WgmmaConvSchedule(path="gemm", bn=96).validate()  # the GEMM's B atoms and C's staging are 64 wide
    op = CHUNKED[0][0]  # 9 taps x 3 boxes of 32 = 27 boxes: 14 stages; 2 boxes of 64 a tap: 18
    assert s.k_steps(op) == 14 and I2C.k_steps(op) == 18
    assert conv.conv_scalars(op, 32)["cblk"] == 3 and conv.conv_scalars(op)["cblk"] == 2
    assert CHUNKED[3][1].k_steps(CHUNKED[3][0]) == 5  # C 20 -> 24: 2 boxes of 16 a tap, 18 boxes, 4 a stage
    assert conv.split_plan(*CHUNKED[2], 132).to_json()["splits"] == 3
    tr = CHUNKED[5][1]
    assert tr.name.endswith("_i2c_tr") and WgmmaConvSchedule.from_json(tr.to_json()) == tr
    assert "trim" not in I2C.to_json() and tr.k_steps(CHUNKED[5][0]) == 18
    assert [trimmed_steps(op) for op, _ in CHUNKED[5:9]] == [2, 3, 2, 1]
    with pytest.raises(BadInputError, match="trim"):
        WgmmaConvSchedule(path="im2col", chunk=32, trim=True).validate()
    for c in (64, 120, 128):  # boxes of 64 filled to within 16 channels: nothing to skip
        with pytest.raises(BadInputError, match="trim"):
            WgmmaConvSchedule(path="im2col", trim=True).validate(Conv2d(1, c, 9, 9, 64, 3, 3, layout="nhwc",
                                                                          dtype="fp16"))
    src = conv.render(*CHUNKED[5])
    assert "const int kend = cbc == cblk - 1 ? (((Cp + 15) & ~15) - (cblk - 1) * 64) / 16 : 4;" in src
    assert "if (k16 >= kend) continue;" in src and "tr_tma_load_im2col(sa, &tmA, cb * 64," in src
    assert "int cbc = 0 % cblk;" in src and "int cbc = kb % cblk;" in conv.render(*CHUNKED[6])


def test_split_sum_covers_every_group_of_a_width_off_64():
    """The last unit's in-place sum over 20 float4 groups (a 64 x 160 tile, 80 accumulators) walks 3 chunks of 8 and
    stops at the 20th: with 64-multiple widths every group count was a multiple of 8, and a 160-wide tile summed 16
    (the GPU test of CHUNKED[2] found 0.33 relative error before)."""
    from tracea.emitters.cuda.hopper import conv

    src = conv.render(*CHUNKED[2])
    assert "for (int c = 0; c < 3; ++c)" in src and "if (c * 8 + e < 20) v[e] = __ldcg" in src
    assert "if (c * 8 + e >= 20) break;" in src
    whole = conv.render(CHUNKED[2][0], dataclasses.replace(CHUNKED[2][1], bn=256, stages=4))  # 32 groups: 4 chunks, no guard
    assert "for (int c = 0; c < 4; ++c)" in whole and "e < 32) v[e]" not in whole and ">= 32) break" not in whole


def test_chunked_operand_layouts_and_descriptors():
    """A stage's 64 k of a K-major operand as boxes of ``chunk`` one after another, each its lines' swizzle (8-line
    atoms: SBO 512 B at 64B, 256 B at 32B); the consumer's descriptors step 32 bytes a k16 and into the next box."""
    from tracea.emitters.cuda.hopper import conv
    from tracea.emitters.cuda.hopper.mainloop import descriptor_strides, operand_layouts

    for chunk, sbo in ((32, 512), (16, 256)):
        lay = operand_layouts(96, True, chunk)
        assert len(lay) == 64 // chunk and [t.base_bytes for t in lay] == [j * 96 * chunk * 2 for j in range(len(lay))]
        assert all(t.swizzle.mode == f"{2 * chunk}B" for t in lay) and descriptor_strides(lay)[1] == sbo
        assert sum(t.size_bytes for t in lay) == 96 * 64 * 2
    src = conv.render(*CHUNKED[0])
    assert "tr_desc64(sb + (k16 / 2) * 6144u + (k16 % 2) * 32u" in src  # B: 96 rows x 64 bytes a box
    assert "tr_desc64(sa + i * 4096u + (k16 / 2) * 8192u + (k16 % 2) * 32u" in src  # A: 128 rows, m64 slices
    assert src.count("tr_tma_load_im2col(sa") == 2 and "(fr < R ? cb : cblk) * 32" in src
    assert "(R * S * cblk + 1) / 2" in src
    src16 = conv.render(*CHUNKED[1])
    assert src16.count("tr_tma_load_3d(sb") == 4 and "tr_desc32(" in src16 and "(R * S * cblk + 3) / 4" in src16


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    return find_nvrtc()


def test_im2col_kernels_compile_for_sm90a_without_spills(nvrtc):
    from test_cuda_splitk import _compile

    from tracea.emitters.cuda.hopper import conv

    for op, sched in CASES + CHUNKED:
        src = conv.render(op, sched)
        assert "tr_tma_load_im2col(sa" in src and "tr_cp_async_16(sa" not in src.split("if (wg == 0)")[1][:3000]
        assert _compile(src, sched.name) == (0, 0, 0), sched.name


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES + CHUNKED, ids=lambda c: c[0].signature[:60] + "_" + c[1].name[-12:])
def test_im2col_path_matches_the_reference(case, tmp_path, monkeypatch):
    from cuda.core import Device

    from tracea.emitters import cuda
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    if Device(0).compute_capability != (9, 0):
        pytest.skip("the Hopper kernels need an sm_90 GPU")
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path))

    class NoReport:
        nvidia = None

    op, sched = case
    k = cuda.build(op, "cuda-wgmma.conv2d", sched, NoReport())
    for seed in (3, 4):
        inputs = op.random_inputs(np.random.default_rng(seed))
        out = k(inputs, np.full(op.output_shape(), 0x7FC0, op.dtype.storage))
        err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
        assert err <= tolerance(op), (seed, err)
