"""NaN and infinity through the CUDA kernels as through torch (issue 30), on a GPU (skipped cleanly without
one): a softmax row holding a NaN or +inf, or only -inf, is NaN; relu keeps a NaN (the epilogue is a compare,
not fmaxf, which returns 0 for a NaN); a NaN in attention's Q makes that row NaN and one in K every row that
keeps that key. Checked against the float64 reference as tests/emitters/test_nan_propagation.py does on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from test_nan_propagation import assert_like_reference

from tracea.kernels import Gemm, Softmax
from tracea.kernels.dtypes import to_float64, to_storage
from tracea.kernels.ops.attention import Attention

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    import os

    os.environ.setdefault("TRACEA_HOME", str(tmp_path_factory.mktemp("nan-home")))
    from tracea.doctor import probe

    return probe()


def _run(vid, op, inputs, host):
    from tracea.emitters import cuda

    if vid.startswith("cuda-wgmma"):
        from cuda.core import Device

        if Device(0).compute_capability != (9, 0):
            pytest.skip("the Hopper kernels need an sm_90 GPU")
    k = cuda.build(op, vid, cuda.hero_schedule(op, vid, host), host)
    return to_float64(k(inputs), op.dtype), k.artifact.name


@pytest.mark.parametrize("cols", [8, 33, 1001, 70001])
def test_softmax_rows_with_nan_inf_or_only_minus_inf_are_nan(host, cols):
    for dtype in ("fp32", "bf16"):
        op = Softmax(6, cols, dtype=dtype)
        x = np.random.default_rng().standard_normal((6, cols)).astype(np.float32)
        x[0, cols // 2], x[1, -1], x[2, 0] = np.nan, np.nan, np.inf
        x[3, :] = -np.inf
        x[4, ::2] = -np.inf
        inputs = {"x": to_storage(x, op.dtype)}
        got, name = _run("cuda-simt.softmax", op, inputs, host)
        with np.errstate(invalid="ignore", over="ignore"):
            ref = op.reference(inputs)
        assert_like_reference(got, ref, op, name)


@pytest.mark.parametrize("vid,dtype", [("cuda-simt.gemm", "fp32"), ("cuda-mma-sync.gemm", "bf16"),
                                       ("cuda-wgmma.gemm", "bf16"), ("cuda-wgmma.gemm", "fp16")])
def test_relu_and_gelu_keep_a_nan(host, vid, dtype):
    for m, n, k, epi in ((130, 96, 72, "bias,relu"), (300, 264, 200, "relu"), (64, 128, 64, "gelu")):
        op = Gemm(m, n, k, dtype=dtype, epilogue=epi)
        inputs = op.random_inputs(np.random.default_rng())
        a = to_float64(inputs["a"], op.dtype)
        a[1, 0] = np.nan
        inputs["a"] = to_storage(a.astype(np.float32), op.dtype)
        got, name = _run(vid, op, inputs, host)
        with np.errstate(invalid="ignore"):
            ref = op.reference(inputs)
        assert_like_reference(got, ref, op, name)
        assert np.isnan(got[1]).all()


@pytest.mark.parametrize("vid", ["cuda-mma-sync.attention", "cuda-wgmma.attention"])
@pytest.mark.parametrize("causal", [False, True], ids=["dense", "causal"])
def test_attention_outputs_that_see_a_nan_are_nan(host, vid, causal):
    for sq, d in ((300, 64), (520, 128)):
        op = Attention(1, 2, sq, d, causal=causal, dtype="bf16")
        inputs = op.random_inputs(np.random.default_rng())
        q, k = to_float64(inputs["q"], op.dtype), to_float64(inputs["k"], op.dtype)
        q[0, 0, 3, 5] = np.nan
        k[0, 1, sq - 2, 0] = np.nan
        inputs["q"], inputs["k"] = to_storage(q.astype(np.float32), op.dtype), to_storage(k.astype(np.float32), op.dtype)
        got, name = _run(vid, op, inputs, host)
        with np.errstate(invalid="ignore"):
            ref = op.reference(inputs)
        assert_like_reference(got, ref, op, name)
