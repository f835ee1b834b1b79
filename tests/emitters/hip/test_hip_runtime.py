"""The HIP runtime (emitters/hip/runtime.py): on a machine without an AMD GPU, one clear line; on one with
it (gpu-marked, skipped elsewhere: it has not run here), the HIP GEMM verified on odd shapes."""

from __future__ import annotations

import pytest

from tracea.doctor.errors import UnsupportedError
from tracea.emitters.hip.runtime import HipRuntime


def _amd() -> HipRuntime | None:
    try:
        return HipRuntime()
    except UnsupportedError:
        return None


def test_without_an_amd_gpu_the_runtime_says_so_in_one_line():
    if _amd() is not None:
        pytest.skip("this machine has an AMD GPU")
    with pytest.raises(UnsupportedError) as info:
        HipRuntime()
    assert "\n" not in info.value.message and ("no AMD GPU" in info.value.message or "not installed" in info.value.message)
    assert "AMD Instinct" in info.value.hint


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 128, 64), (257, 129, 300), (1, 33, 17)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_the_hip_gemm_on_an_amd_gpu(shape, dtype):
    import random

    from tracea.doctor import probe
    from tracea.emitters.hip.gemm import HipGemmSchedule
    from tracea.emitters.hip.run_amd import on_amd
    from tracea.kernels import Gemm
    from tracea.kernels.dtypes import parse_dtype

    if _amd() is None:
        pytest.skip("no AMD GPU with the HIP runtime here")
    target = probe().amd.devices[0].gfx_target
    op = Gemm(*shape, dtype=parse_dtype(dtype), epilogue="bias,gelu,residual")
    r = on_amd(op, HipGemmSchedule(), target, seed=random.randrange(1 << 30))
    assert r["ok"] and r["p50_ms"] > 0, r
