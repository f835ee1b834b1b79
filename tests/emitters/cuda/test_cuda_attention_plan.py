"""The CUDA attention kernels' host tile plan (emitters/cuda/attention_plan.py): the tiles it visits, with the
element test on its partial tiles, keep exactly the reference's pairs, on odd shapes and every mask kind."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.emitters.cuda.attention_plan import keep_model, mask_scalars, tile_plan
from tracea.kernels.ops.attention import Attention

RNG = np.random.default_rng(5)

CASES = [
    Attention(1, 2, 17, 64),
    Attention(1, 1, 300, 64, causal=True),
    Attention(1, 1, 200, 64, seq_k=333, causal=True),
    Attention(1, 1, 333, 64, seq_k=200, causal=True),  # the first rows keep nothing
    Attention(1, 1, 1000, 128, window=(100, 37)),
    Attention(1, 1, 257, 64, causal=True, window=(64, 0)),
    Attention(1, 1, 300, 64, seq_k=450, block_size=(100, 70), block_mask=RNG.random((3, 7)) < 0.4),
    Attention(1, 1, 256, 64, block_size=(128, 128), block_mask=np.array([[True, False], [True, True]]), causal=True),
    Attention(1, 1, 1, 64, seq_k=1000),
]


@pytest.mark.parametrize("op", CASES, ids=lambda o: o.signature[:60])
@pytest.mark.parametrize("bq,bk", [(64, 64), (128, 64), (128, 128), (64, 176)])
def test_visited_tiles_keep_the_reference_pairs(op, bq, bk):
    plan = tile_plan(op, bq, bk)
    assert np.array_equal(keep_model(op, plan), op.keep_mask(0, op.seq_q))
    # a full tile needs no element test: every pair in it (of real rows, real keys) is kept
    for t in range(plan.q_tiles):
        for k_tile, partial in plan.entries(t):
            if not partial:
                rows = slice(t * bq, min((t + 1) * bq, op.seq_q))
                assert (k_tile + 1) * bk <= op.seq_k
                assert op.keep_mask(rows.start, rows.stop, k_tile * bk, (k_tile + 1) * bk).all()
            else:  # a visited tile keeps something
                rows = slice(t * bq, min((t + 1) * bq, op.seq_q))
                assert op.keep_mask(rows.start, rows.stop, k_tile * bk, min((k_tile + 1) * bk, op.seq_k)).any()


def test_causal_plan_skips_the_upper_triangle_and_orders_long_rows_first():
    op = Attention(2, 4, 1024, 128, causal=True)
    plan = tile_plan(op, 128, 128)
    assert plan.computed == 8 * 9 // 2 and plan.partial == 8  # the diagonal tiles only
    assert plan.computed * op.batch * op.heads == op.tile_counts((128, 128))[1]
    assert list(plan.order[:2]) == [7, 6]


def test_dense_plan_has_only_full_tiles_and_the_edge():
    op = Attention(1, 1, 1000, 64)
    plan = tile_plan(op, 128, 128)
    assert plan.computed == 8 * 8
    assert plan.partial == 8  # the last k tile (keys 896..999) of each q tile is cut by seq_k


def test_mask_scalars_fold_causal_into_the_window():
    s = mask_scalars(Attention(1, 2, 64, 64, seq_k=96, causal=True, window=(10, 5)))
    assert (s["diag"], s["win_left"], s["win_right"]) == (32, 10, 0)
    s = mask_scalars(Attention(1, 2, 64, 64))
    assert s["win_left"] == s["win_right"] == 128 and s["scale_log2"] == pytest.approx(1.4426950408889634 / 8)
