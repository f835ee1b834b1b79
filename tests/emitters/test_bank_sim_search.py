"""What the emitter and the tuner take from the simulator: the C expression of a layout's offsets (so
what is emitted is what was scored) and the swizzle ranking behind the tuner's pruning rule."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tracea.emitters.bank_search import default_candidates, rank_swizzles, score, should_drop
from tracea.emitters.layout import NoSwizzle, Swizzle, TileLayout, TmaSwizzle, XorSwizzle

LAYOUTS = [TileLayout(128, 64, 2, swizzle=TmaSwizzle("128B"), base_bytes=2048),
           TileLayout(64, 32, 2, swizzle=TmaSwizzle("64B")), TileLayout(64, 128, 2, "col", swizzle=XorSwizzle(4)),
           TileLayout(32, 32, 4, pad_elems=1), TileLayout(64, 64, 2, swizzle=Swizzle(2, 4, -3)),
           TileLayout(32, 32, 4, swizzle=Swizzle(5, 2, 5)), TileLayout(16, 128, 1, swizzle=XorSwizzle(8))]


@pytest.mark.parametrize("lay", LAYOUTS, ids=lambda lay: lay.describe())
def test_c_offset_computes_offset(lay):
    expr = lay.c_offset("r", "c")
    assert re.fullmatch(r"[\w\s()*+^&%/<>u]+", expr), expr  # plain unsigned C arithmetic
    as_python = re.sub(r"\b(0x[0-9a-f]+|\d+)u\b", r"\1", expr).replace("/", "//")
    r, c = np.meshgrid(np.arange(lay.rows), np.arange(lay.cols), indexing="ij")
    assert np.array_equal(eval(as_python, {"r": r, "c": c}), lay.offset(r, c))  # noqa: S307 - our own expression


def test_rank_finds_the_128B_swizzle_for_a_bf16_gemm_tile():
    ranked = rank_swizzles(TileLayout(128, 64, 2), ["ldmatrix.x4", "cp.async.128.row"])
    free = {s.layout.swizzle.name for s in ranked if s.conflict_free}
    assert {"Xor8", "TMA 128B (= Swizzle<3,4,3>)", "Swizzle<3,4,3>"} <= free
    assert ranked[-1].totals["conflicts"] > 0 and ranked[0].to_json()["conflicts"] == 0


def test_rank_finds_the_word_swizzle_for_an_fp32_transpose():
    ranked = rank_swizzles(TileLayout(32, 32, 4), ["ld.32.column", "st.32.row"])
    assert ranked[0].layout.swizzle == Swizzle(5, 2, 5) and ranked[0].conflict_free
    assert not any(s.conflict_free for s in ranked[1:] if s.layout.swizzle != Swizzle(5, 2, 5))


def test_should_drop():
    accesses = ["ldmatrix.x4", "cp.async.128.row"]
    assert should_drop(TileLayout(128, 64, 2), accesses)                       # conflicts; 128B swizzle does not
    assert not should_drop(TileLayout(128, 64, 2, swizzle=TmaSwizzle("128B")), accesses)
    assert not should_drop(TileLayout(128, 64, 2, pad_elems=8), accesses)      # padding is already conflict-free
    assert not should_drop(TileLayout(128, 64, 2), accesses, candidates=[NoSwizzle()])  # no better choice


def test_candidates_fit_the_bank_window_and_score_needs_accesses():
    assert all(getattr(s, "base", 2) + getattr(s, "bits", 0) <= 7 for s in default_candidates())
    with pytest.raises(Exception, match="at least one access"):
        score(TileLayout(8, 8, 4), [])
