"""The SIMT GEMM's K split and small tiles on a real GPU (skipped cleanly without one): odd shapes against the
float64 reference on fresh random inputs, with fused epilogues, and the split's determinism (runs give the
same bits; each launch leaves its arrival counters at rest for the next)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.emitters.cuda.schedule import CudaSchedule
from tracea.kernels import Gemm, relative_error, tolerance

pytestmark = pytest.mark.gpu

VID = "cuda-simt.gemm"
BIG = CudaSchedule("simt", bm=128, bn=128, bk=16, wm=32, wn=64, stages=2, raster=8)


class NoReport:
    nvidia = None


CASES = [  # (op, schedule or None for the hero)
    (Gemm(1000, 999, 1001), None),
    (Gemm(1000, 999, 1001, epilogue=("bias", "relu")), dataclasses.replace(BIG, split_k=4)),
    (Gemm(37, 1001, 4097), None),
    (Gemm(1, 513, 8191), None),
    (Gemm(257, 129, 65, epilogue=("bias", "relu")), None),
    (Gemm(257, 129, 65, epilogue=("bias", "relu")), dataclasses.replace(BIG, bm=64, bn=64, split_k=5)),
    (Gemm(777, 1333, 555, layout_a="col", layout_b="col", epilogue=("residual", "scale"), alpha=0.5), None),
    (Gemm(64, 4096, 4096, epilogue=("gelu",)), None),
    (Gemm(100, 70, 999, layout_b="col"), dataclasses.replace(BIG, bm=32, bn=64, bk=8, split_k=7)),
    (Gemm(130, 250, 3001), dataclasses.replace(BIG, bm=128, bn=64, wm=64, wn=32, bk=8, split_k=3)),
]


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


@pytest.mark.parametrize("op,sched", CASES, ids=lambda x: getattr(x, "signature", getattr(x, "name", ""))[:48])
def test_split_and_small_tiles_match_the_reference(op, sched):
    from tracea.emitters import cuda

    s = sched or cuda.hero_schedule(op, VID, NoReport())
    k = cuda.build(op, VID, s, NoReport())
    for seed in (5, 6):  # the second launch starts from the counters the first left
        inputs = op.random_inputs(np.random.default_rng(seed))
        out = np.full(op.output_shape(), np.nan, np.float32)
        k(inputs, out)
        err = relative_error(out.astype(np.float64), op.reference(inputs))
        assert err <= tolerance(op), (s.name, seed, err)
    again = k(inputs)
    assert np.array_equal(out.view(np.uint32), again.view(np.uint32)), f"{s.name}: two runs differ"
    res = k.artifact.metadata["resources"]
    assert res["spills"] == 0, res


def test_a_split_hero_is_deterministic_under_timing():
    """Many launches in a row (the timing loop) and then a call: the same bits as the first call."""
    from tracea.emitters import cuda

    op = Gemm(1000, 1001, 3001, epilogue=("bias",))  # (1000x999x1001's hero is the unsplit lane-filled form)
    s = cuda.hero_schedule(op, VID, NoReport())
    assert s.split_k > 1, s.name
    k = cuda.build(op, VID, s, NoReport())
    inputs = op.random_inputs(np.random.default_rng(9))
    first = k(inputs)
    t = k.time(inputs, warmup=2, repeats=10)
    assert t.p50_ms > 0
    assert np.array_equal(first.view(np.uint32), k(inputs).view(np.uint32))
