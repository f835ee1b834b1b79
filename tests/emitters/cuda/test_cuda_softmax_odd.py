"""Softmax rows whose length the 16-byte vector does not divide (issue 16: 50257, 32001, 4097, ...), on a GPU:
the hero of every dtype and of each row count (one row, a few, many: the split, block-per-row and rows-per-block
forms), and every candidate of the search space for a few odd shapes (single pass, two passes, persistent
grids, rows per block, split rows), each verified against the float64 reference on fresh random inputs.
The output starts as NaN, so an element a partial head or tail slot failed to write is caught; a write
into a neighbouring row's elements shows in that row's error. Skipped cleanly without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.kernels import Softmax, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

pytestmark = pytest.mark.gpu

VID = "cuda-simt.softmax"
DTYPES = ("fp32", "fp16", "bf16")
COLS = (1, 7, 1001, 4097, 50257, 128257)
ROWS = (1, 3, 3000)


class NoGpu:
    nvidia = None


def _host():
    from cuda.core import Device

    gpu = type("Gpu", (), {"sm_count": int(Device(0).properties.multiprocessor_count)})()
    return type("Host", (), {"nvidia": type("Nv", (), {"devices": [gpu]})()})()


@pytest.fixture(autouse=True)
def _home(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


def _check(op: Softmax, schedule, seed: int) -> None:
    from tracea.emitters import cuda

    k = cuda.build(op, VID, schedule, NoGpu())
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), np.nan if op.dtype.value != "bf16" else 0x7FC0, op.dtype.storage)
    k(inputs, out)
    got = to_float64(out, op.dtype)
    assert not np.isnan(got).any(), (schedule.name, np.argwhere(np.isnan(got))[:4])
    ref = op.reference(inputs)
    err = relative_error(got, ref)
    assert err <= tolerance(op), (op.signature, schedule.name, err)
    assert np.all(np.abs(got.sum(axis=1) - 1) <= 64 * tolerance(op)), (op.signature, schedule.name)
    np.testing.assert_array_equal(k(inputs), out)  # deterministic, the split form included


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", ROWS)
def test_hero_of_odd_rows_matches_the_reference(rows, cols, dtype):
    from tracea.emitters.cuda.softmax import hero_schedule

    op = Softmax(rows, cols, dtype)
    _check(op, hero_schedule(op, _host()), seed=np.random.SeedSequence().entropy % 2**32)


@pytest.mark.parametrize("op", [Softmax(37, 1001, "fp16"), Softmax(5, 4097, "bf16"), Softmax(3, 50257),
                                Softmax(129, 129, "bf16"), Softmax(2, 128257, "fp16"), Softmax(300, 1002, "fp16"),
                                Softmax(6, 32001, "bf16")],
                         ids=lambda op: op.signature)
def test_every_candidate_on_odd_rows_matches_the_reference(op):
    from tracea.emitters import cuda
    from tracea.emitters.cuda.softmax import hero_schedule

    hero = hero_schedule(op, _host())
    assert hero.vec == 16 // op.dtype.itemsize, hero.name  # 16-byte slots, not scalar rows
    seed = np.random.SeedSequence().entropy % 2**32
    for s in [hero, *(c for c in cuda.search_space(op, VID, NoGpu()) if c != hero)]:
        _check(op, s, seed)
