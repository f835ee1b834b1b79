"""The Hopper conv's im2col path (``emitters/cuda/hopper/im2col.py``): schedule values and the limits of
TMA's im2col mode without a GPU, NVRTC compiles for sm_90a, and on an sm_90 GPU every case verified
against the float64 reference on fresh random inputs: padding, stride, dilation and filter shapes that
differ between height and width (the corners and offsets are per dimension), channels that are not a
multiple of 64 or of 8, tiles that run across rows and images, NCHW, bias, split-K."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda.hopper.conv_paths import im2col_unsupported
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
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


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    return find_nvrtc()


def test_im2col_kernels_compile_for_sm90a_without_spills(nvrtc):
    from test_cuda_splitk import _compile

    from tracea.emitters.cuda.hopper import conv

    for op, sched in CASES:
        src = conv.render(op, sched)
        assert "tr_tma_load_im2col(sa, &tmA" in src and "tr_cp_async_16(sa" not in src.split("if (wg == 0)")[1][:3000]
        assert _compile(src, sched.name) == (0, 0, 0), sched.name


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].signature[:60])
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
