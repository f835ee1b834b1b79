"""On an sm_90 GPU: the Hopper GEMM with 2-block clusters along N (``cluster_axis = "n"``, the pair sharing
A by TMA multicast), every form of tests/emitters/cuda/test_cuda_cluster_n.py's ``COMPILE_CASES`` (the 512 x 512 x 16384
tail shape with cuBLAS's 128 x 64 split-K form, odd edges, column-major operands with a fused epilogue,
ping-pong, split-K 0 / 3 / 4 with both fix-ups, an odd number of tile columns, not persistent) verified
against the float64 reference on fresh random inputs, into an output poisoned with NaN, and run again
bit-identical (split-K's fix-up sums the slices in a fixed order). Each case prints its p50 time
(``pytest -s``).

    python -m pytest -q -s tests/emitters/cuda/test_cuda_cluster_n_gpu.py
"""

from __future__ import annotations

import numpy as np
import pytest
from test_cuda_cluster_n import COMPILE_CASES

pytestmark = pytest.mark.gpu


@pytest.fixture
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("case", COMPILE_CASES, ids=lambda c: c[1].name + "-" + c[0].signature[:32])
def test_cluster_n_forms_verify_and_repeat_bit_identically(case, _home):
    from cuda.core import Device

    from tracea.emitters import cuda
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    if Device(0).compute_capability != (9, 0):
        pytest.skip("the Hopper kernels need an sm_90 GPU")

    class NoReport:
        nvidia = None

    op, sched = case
    k = cuda.build(op, "cuda-wgmma.gemm", sched, NoReport())
    assert k.schedule.cluster_axis == "n" and k.rendered.metadata["tile"]["cluster_axis"] == "n"
    if sched.split >= 2:  # split 0 splits only where the tiles leave SMs idle (777x1333: 42 pairs do not)
        assert k.rendered.metadata["split_k"]["splits"] >= 2, k.rendered.metadata["split_k"]
    inputs = op.random_inputs(np.random.default_rng(11))
    first = k(inputs, np.full(op.output_shape(), 0x7FC0, op.dtype.storage))  # NaN: every element written
    err = relative_error(to_float64(first, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), (sched.name, err)
    assert np.array_equal(k(inputs).view(np.uint16), first.view(np.uint16))
    t = k.time(inputs, warmup=2, repeats=10)
    assert 0 < t.p50_ms
    assert np.array_equal(k(inputs).view(np.uint16), first.view(np.uint16))  # semaphores reset after timing
    print(f"\n{op.signature} {sched.name}: {t.p50_ms:.4f} ms (grid {k._grid})")
