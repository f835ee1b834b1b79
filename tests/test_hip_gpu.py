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
