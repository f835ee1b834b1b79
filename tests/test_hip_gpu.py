"""The HIP MFMA GEMM's logic on an NVIDIA GPU (issue 19): the same body as the gfx90a/gfx942 code objects,
rendered after the NVIDIA prelude (software MFMA with AMD's placements), verified against the float64
reference on fresh random inputs, odd shapes included. Skipped without a GPU and CuPy."""

from __future__ import annotations

import pytest

from tracea.emitters.hip.gemm import HipGemmSchedule
from tracea.kernels import Gemm
from tracea.kernels.dtypes import parse_dtype

pytestmark = pytest.mark.gpu

SHAPES = [(128, 128, 64), (200, 176, 72), (1, 33, 17), (257, 129, 300), (64, 1000, 8), (333, 65, 1000)]
SCHEDULES = [HipGemmSchedule(), HipGemmSchedule(bm=64, bn=128, bk=32, waves_m=1, waves_n=2),
             HipGemmSchedule(bm=256, bn=128, bk=16, waves_m=2, waves_n=2, pad=8)]


@pytest.fixture(scope="module")
def gpu():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no GPU")
    return cp


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda s: s.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_hip_gemm_logic_is_right_on_odd_shapes(gpu, dtype, sched, shape):
    import random

    from tracea.emitters.hip.run_nvidia import gemm_on_nvidia

    m, n, k = shape
    r = gemm_on_nvidia(Gemm(m, n, k, dtype=parse_dtype(dtype)), sched, seed=random.randrange(1 << 30))
    assert r["ok"], r


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("rows_per_group", [1, 4])
@pytest.mark.parametrize("shape", [(1, 1), (7, 63), (33, 130), (5, 4097), (4096, 128), (3, 50000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_hip_softmax_logic_is_right_on_odd_shapes(gpu, dtype, rows_per_group, shape):
    import random

    from tracea.emitters.hip.run_nvidia import softmax_on_nvidia
    from tracea.emitters.hip.softmax import HipSoftmaxSchedule
    from tracea.kernels import Softmax

    r = softmax_on_nvidia(Softmax(*shape, dtype=parse_dtype(dtype)), HipSoftmaxSchedule(rows_per_group),
                          seed=random.randrange(1 << 30))
    assert r["ok"], r


CONVS = [  # (n, c, h, w, k, r, s, stride, padding, dilation)
    (2, 64, 14, 14, 64, 3, 3, 1, 1, 1), (1, 3, 31, 29, 32, 7, 7, 2, 3, 1), (3, 17, 9, 11, 40, 1, 1, 1, 0, 1),
    (1, 24, 12, 12, 24, 3, 3, 1, 2, 2), (2, 8, 8, 8, 130, 3, 1, (2, 1), (1, 0), 1),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("conv", CONVS, ids=lambda c: "x".join(map(str, c[:7])))
def test_the_hip_conv_logic_is_right_on_odd_shapes(gpu, dtype, conv):
    import random

    from tracea.emitters.hip.run_nvidia import conv_on_nvidia
    from tracea.kernels import Conv2d

    n, c, h, w, k, r, s, st, pad, dil = conv
    op = Conv2d(n, c, h, w, k, r, s, stride=st, padding=pad, dilation=dil, layout="nhwc", dtype=parse_dtype(dtype))
    for sched in SCHEDULES[:2]:
        res = conv_on_nvidia(op, sched, seed=random.randrange(1 << 30))
        assert res["ok"], (sched.name, res)
