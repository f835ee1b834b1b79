"""Row softmax compiled and run on every family this machine can run: odd shapes, the three types,
rows split between threads, and inputs that overflow exp without the max subtraction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.kernels import Softmax, relative_error, tolerance
from tracea.kernels.dtypes import to_float64, to_storage

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")
SHAPES = [(1, 1), (7, 33), (33, 1000), (1023, 7), (2, 4097), (1000, 1023)]


pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled


def variant(family: str, dtype: str):
    v = cpu.resolve(f"{family}.softmax")
    if v.unmet(HOST, dtype):
        pytest.skip(f"{v.id} cannot run here: {'; '.join(v.unmet(HOST, dtype))}")
    return v


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_softmax_matches_the_reference(family, dtype):
    v = variant(family, dtype)
    rng = np.random.default_rng()
    for rows, cols in SHAPES:
        op = Softmax(rows, cols, dtype=dtype)
        kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
        inputs = op.random_inputs(rng)
        err = relative_error(to_float64(kernel(inputs), op.dtype), op.reference(inputs))
        assert err <= tolerance(op), f"{op.signature}: relative error {err:.3g}"


@pytest.mark.parametrize("family", FAMILIES)
def test_softmax_is_stable_and_thread_count_free(family):
    v = variant(family, "fp32")
    op = Softmax(64, 515)
    rng = np.random.default_rng()
    x = to_storage(rng.standard_normal((64, 515)).astype(np.float32) * 30 + 1e4, op.dtype)  # exp(x) = inf
    x[3] = -1e4  # and a row whose exp(x) is 0
    inputs = {"x": x}
    one = cpu.build(op, v, dataclasses.replace(cpu.hero_schedule(op, v, HOST), threads=1), HOST)(inputs)
    assert np.all(np.isfinite(one)) and relative_error(one, op.reference(inputs)) <= tolerance(op)
    many = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)(inputs)
    assert np.array_equal(one, many)


@pytest.mark.parametrize("shape", [(33, 1000), (1, 128256)])
def test_torch_baseline_computes_the_same_softmax(shape):
    """The suite's softmax baseline is torch.softmax where torch is installed (the one that counts: NumPy has
    no fused softmax), and it agrees with the float64 reference."""
    torch = pytest.importorskip("torch")
    from tracea.emitters.baselines.softmax import host as softmax_baseline

    op = Softmax(rows=shape[0], cols=shape[1], dtype="fp32")
    inputs = op.random_inputs(np.random.default_rng())
    base = softmax_baseline(op, inputs)
    assert base.run is not None and base.name.startswith(f"torch {torch.__version__}")
    assert relative_error(np.asarray(base.run(), np.float64), op.reference(inputs)) <= tolerance(op)
