"""The HIP kernels' logic on an NVIDIA GPU (issue 19): the same bodies as the gfx90a/gfx942 code objects,
rendered after the NVIDIA prelude (software MFMA with AMD's placements), verified against the float64
reference on fresh random inputs, odd shapes, every epilogue, both operand layouts and fp32 included; and
the backend's own heuristic schedules. Skipped without a GPU and CuPy."""

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


def _run(op, sched):
    import random

    from tracea.emitters.hip.run_nvidia import on_nvidia

    return on_nvidia(op, sched, seed=random.randrange(1 << 30))


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda s: s.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_hip_gemm_logic_is_right_on_odd_shapes(gpu, dtype, sched, shape):
    if sched.lds_bytes(dtype) > 64 * 1024:
        pytest.skip(f"{sched.name} is not an {dtype} schedule: its LDS exceeds a CDNA workgroup's 64 KiB")
    m, n, k = shape
    r = _run(Gemm(m, n, k, dtype=parse_dtype(dtype)), sched)
    assert r["ok"], r


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("case", [
    ("bias,gelu", "row", "row", 1.0), ("scale,residual,relu", "col", "row", -0.75), ("relu,bias", "row", "col", 1.0),
    ("bias,gelu,scale,residual", "col", "col", 2.5), ("", "col", "col", 3.0),
], ids=lambda c: f"{c[0] or 'none'}-{c[1]}{c[2]}")
def test_the_hip_gemm_epilogues_and_layouts(gpu, dtype, case):
    """Every epilogue op, in orders where a wrong order shows, and alpha applied only when the chain scales."""
    chain, la, lb, alpha = case
    for m, n, k in ((200, 176, 72), (1, 33, 17), (333, 65, 1000)):
        op = Gemm(m, n, k, dtype=parse_dtype(dtype), epilogue=chain, layout_a=la, layout_b=lb, alpha=alpha)
        r = _run(op, SCHEDULES[0])
        assert r["ok"], ((m, n, k), r)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", [(4096, 4096, 64), (17, 4096, 64), (300, 70, 33)], ids=lambda s: "x".join(map(str, s)))
def test_the_backends_heuristic_schedule_runs_right(gpu, dtype, shape):
    """What `tracea emit --backend hip --arch ...` picks (a target without a CU count: 104, an MI210's), run for its logic."""
    from tracea.doctor import probe
    from tracea.emitters import registry

    b = registry.backend("hip")
    op = Gemm(*shape, dtype=parse_dtype(dtype))
    sched = b.hero_schedule(op, "hip-mfma.gemm", probe())
    assert _run(op, sched)["ok"]


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("rows_per_group", [1, 4])
@pytest.mark.parametrize("shape", [(1, 1), (7, 63), (33, 130), (5, 4097), (4096, 128), (3, 50000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_hip_softmax_logic_is_right_on_odd_shapes(gpu, dtype, rows_per_group, shape):
    from tracea.emitters.hip.softmax import HipSoftmaxSchedule
    from tracea.kernels import Softmax

    r = _run(Softmax(*shape, dtype=parse_dtype(dtype)), HipSoftmaxSchedule(rows_per_group))
    assert r["ok"], r


CONVS = [  # (n, c, h, w, k, r, s, stride, padding, dilation)
    (2, 64, 14, 14, 64, 3, 3, 1, 1, 1), (1, 3, 31, 29, 32, 7, 7, 2, 3, 1), (3, 17, 9, 11, 40, 1, 1, 1, 0, 1),
    (1, 24, 12, 12, 24, 3, 3, 1, 2, 2), (2, 8, 8, 8, 130, 3, 1, (2, 1), (1, 0), 1),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("conv", CONVS, ids=lambda c: "x".join(map(str, c[:7])))
def test_the_hip_conv_logic_is_right_on_odd_shapes(gpu, dtype, conv):
    from tracea.kernels import Conv2d

    n, c, h, w, k, r, s, st, pad, dil = conv
    for bias in (False, True):
        op = Conv2d(n, c, h, w, k, r, s, stride=st, padding=pad, dilation=dil, layout="nhwc", bias=bias,
                    dtype=parse_dtype(dtype))
        for sched in SCHEDULES[:2]:
            if sched.lds_bytes(dtype) <= 64 * 1024:  # valid in this dtype
                res = _run(op, sched)
                assert res["ok"], (sched.name, bias, res)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_the_hip_softmax_takes_masked_minus_infinity(gpu, dtype):
    """Rows with -inf entries (a mask), some where a lane's first element is -inf and one all -inf but one:
    no NaN from exp(-inf - -inf); the float64 reference gives those entries 0."""
    import numpy as np

    from tracea.emitters.hip.run_nvidia import on_nvidia
    from tracea.emitters.hip.softmax import HipSoftmaxSchedule
    from tracea.kernels import Softmax

    op = Softmax(9, 300, dtype=parse_dtype(dtype))
    x = op.random_inputs(np.random.default_rng(3))["x"].astype(np.float32)
    x[:, :64] = -np.inf  # every lane's first element
    x[1, 64:299] = -np.inf  # one element left
    x[2, ::3] = -np.inf
    inputs = {"x": x.astype(op.dtype.storage) if dtype == "fp32" else x.astype(np.float16)}
    r = on_nvidia(op, HipSoftmaxSchedule(4), seed=0, inputs=inputs)
    assert r["ok"], r
