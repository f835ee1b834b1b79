"""The SIMT GEMM core's forms on a real GPU (skipped cleanly without one): the FMA order, the fragments
double-buffered in registers, the cp.async pipeline, 2 blocks an SM, 16-warp blocks, 8 x 16 thread tiles,
the short tiles for few rows, the gemv form (rows in groups of at most 48) and the lane-filled cp.async forms
(``simt.FILL_FORMS``), on odd shapes and layouts against the float64 reference on fresh random inputs; split
forms give the same bits run after run; and every form of ``simt.forms`` on one odd shape."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.emitters.cuda import simt
from tracea.emitters.cuda.schedule import CudaSchedule
from tracea.kernels import Gemm, relative_error, tolerance

pytestmark = pytest.mark.gpu

VID = "cuda-simt.gemm"
BIG = CudaSchedule("simt", bm=128, bn=128, bk=16, wm=32, wn=64, stages=2, raster=8)


class NoReport:
    nvidia = None


CASES = [
    (Gemm(1000, 999, 1001), dataclasses.replace(BIG, order="snake", split_k=2)),
    (Gemm(1000, 999, 1001, epilogue=("bias", "relu")), dataclasses.replace(BIG, frags=2, split_k=2)),
    (Gemm(1000, 999, 1001), dataclasses.replace(BIG, stages=3, split_k=2)),
    (Gemm(1000, 999, 1001, layout_a="col"), dataclasses.replace(BIG, stages=4, frags=2, order="snake", split_k=3)),
    (Gemm(777, 1333, 555, layout_a="col", layout_b="col", epilogue=("residual", "scale"), alpha=0.5),
     dataclasses.replace(BIG, bm=64, bn=64, stages=3, order="snake", split_k=2)),
    (Gemm(1024, 1024, 1024), dataclasses.replace(BIG, stages=3, order="snake")),
    (Gemm(1024, 1024, 1024, layout_b="col"), dataclasses.replace(BIG, bk=8, stages=4, min_blocks=2, order="snake")),
    (Gemm(513, 1030, 260), dataclasses.replace(BIG, bk=32, stages=3, order="snake")),
    (Gemm(520, 1024, 264), CudaSchedule("simt", 128, 256, 8, 32, 64, 2, raster=8, frags=2)),
    (Gemm(513, 1030, 260, layout_a="col"), CudaSchedule("simt", 256, 128, 8, 64, 32, 4, raster=8, order="snake")),
    (Gemm(64, 4096, 4096, epilogue=("gelu",)), CudaSchedule("simt", 64, 256, 16, 32, 64, 4, raster=8, split_k=8)),
    (Gemm(37, 1001, 4097), CudaSchedule("simt", 32, 256, 8, 16, 128, 2, raster=8, split_k=8)),
    (Gemm(37, 1001, 4097), CudaSchedule("simt", 32, 512, 8, 16, 128, 3, raster=8, order="snake", split_k=12)),
    (Gemm(1, 513, 8191), CudaSchedule("simt", 16, 512, 8, 16, 128, 3, raster=8, order="snake", split_k=16)),
    (Gemm(1024, 1024, 1024), CudaSchedule("simt", 128, 256, 8, 64, 64, 3, raster=8, order="snake", thread_n=16)),
    (Gemm(1000, 999, 1001, layout_b="col", epilogue=("bias",)),
     CudaSchedule("simt", 256, 128, 8, 64, 64, 4, raster=8, frags=2, order="snake", thread_n=16, split_k=2)),
    # the lane-filled forms (fill lanes/spread): each on the odd shape, unsplit and split in 2, then
    # other layouts, epilogues and shapes (K shorter than the pipeline, aligned rows, tiles past M and N)
    *((Gemm(1000, 999, 1001), f) for f in simt.fill_forms()),
    *((Gemm(1000, 999, 1001), dataclasses.replace(f, split_k=2)) for f in simt.fill_forms()),
    (Gemm(777, 1333, 555, layout_a="col", layout_b="col", epilogue=("residual", "scale"), alpha=0.5),
     simt.fill_forms()[0]),
    (Gemm(777, 1333, 555, layout_a="col", epilogue=("bias", "gelu")), simt.fill_forms()[1]),
    (Gemm(1000, 999, 1001, layout_b="col"), dataclasses.replace(simt.fill_forms()[1], split_k=3)),
    (Gemm(777, 1333, 555, layout_b="col", epilogue=("bias",)), simt.fill_forms()[2]),
    (Gemm(1024, 1024, 1024), simt.fill_forms()[0]),
    (Gemm(1000, 1000, 1000, layout_a="col", epilogue=("relu",)), simt.fill_forms()[1]),
    (Gemm(70, 3001, 13), simt.fill_forms()[0]),
    (Gemm(1, 513, 8191, epilogue=("gelu",)), simt.gemv_schedule(Gemm(1, 513, 8191), 132)),
    (Gemm(1, 513, 8191), simt.gemv_schedule(Gemm(1, 513, 8191), 132, 1)),
    (Gemm(7, 4097, 4096, layout_a="col", epilogue=("bias", "residual")), simt.gemv_schedule(Gemm(7, 4097, 4096), 132)),
    (Gemm(37, 1001, 4097), simt.gemv_schedule(Gemm(37, 1001, 4097), 132)),
    (Gemm(48, 999, 2000, epilogue=("gelu",)), simt.gemv_schedule(Gemm(48, 999, 2000), 132, 1)),
    (Gemm(64, 4096, 4096, epilogue=("gelu",)), simt.gemv_schedule(Gemm(64, 4096, 4096), 132)),
    (Gemm(77, 1001, 999, layout_a="col"), simt.gemv_schedule(Gemm(77, 1001, 999), 132)),
]


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


def _check(op, s, seeds=(5, 6), spills_ok=False) -> None:
    from tracea.emitters import cuda

    k = cuda.build(op, VID, s, NoReport())
    for seed in seeds:  # with a split, the second launch starts from the counters the first left
        inputs = op.random_inputs(np.random.default_rng(seed))
        out = np.full(op.output_shape(), np.nan, np.float32)
        k(inputs, out)
        err = relative_error(out.astype(np.float64), op.reference(inputs))
        assert err <= tolerance(op), (s.name, seed, err)
    again = k(inputs)
    assert np.array_equal(out.view(np.uint32), again.view(np.uint32)), f"{s.name}: two runs differ"
    assert spills_ok or k.artifact.metadata["resources"]["spills"] == 0, k.artifact.metadata["resources"]


@pytest.mark.parametrize("op,s", CASES, ids=lambda x: getattr(x, "name", "")[:48])
def test_forms_match_the_reference(op, s):
    if s.form == "gemv" and not simt.GEMV_SEARCHED:
        pytest.skip("the gemv form is off: it faulted (illegal address) on the H100, simt.GEMV_MAX_M")
    s.validate(op)
    # 128x256x8 with double-buffered fragments spills 16 B on aligned shapes (H100 sweeps of 2026-11-25 and
    # -26, docs/device-runs/h100-simt-lane-filled-rule/): a searched form, not a hero; its result is still checked
    _check(op, s, spills_ok=(s.bm, s.bn, s.bk, s.frags) == (128, 256, 8, 2))


@pytest.mark.parametrize("i", range(len(simt.CORE_FORMS) + len(simt.FILL_FORMS) + len(simt.SKINNY_FORMS)))
def test_every_form_on_an_odd_shape(i):
    """Each form the tuner and the sweep try, on 200 x 333 x 301 (64 rows for the short tiles) split in 2."""
    big = Gemm(200, 333, 301)
    every = simt.forms(Gemm(64, 333, 301))
    s = dataclasses.replace(every[i], split_k=2)
    op = Gemm(64, 333, 301) if s.bm < 64 or i >= len(simt.CORE_FORMS) + len(simt.FILL_FORMS) else big
    s.validate(op)
    _check(op, s, seeds=(3,), spills_ok=True)  # a form that spills here is timed elsewhere, not wrong
