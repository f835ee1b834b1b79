"""The Hopper attention kernel's packed form (``hopper/attention_packed.py``) without a GPU: its slot
mapping gives every q tile of every entry exactly one block for any offsets (empty entries, entries ending on
and off a tile edge, one entry holding every token); its NumPy model, which reads and masks the rows the
kernel's TMA boxes read (the next entry's rows where a tile crosses the entry's end, zeros past the last
token), matches the float64 reference; its key-tile runs equal the host plan's of the same entry; the
render carries the packed signature and grid; schedules and masks it cannot compute are refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda.attention_plan import tile_plan
from tracea.emitters.cuda.hopper import attention_packed as packed
from tracea.emitters.cuda.hopper.attention import render
from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule, hero_schedule
from tracea.kernels import relative_error
from tracea.kernels.ops.attention import Attention, lse_error


def _op(lens: tuple[int, ...], cap: int, heads: int = 2, d: int = 32, **kw) -> Attention:
    return Attention(len(lens), heads, cap, d, seq_k=cap, seq_lens=lens, packed=True, dtype="bf16", **kw)


@pytest.mark.parametrize("bq", [64, 128, 192])
@pytest.mark.parametrize("seed", range(6))
def test_every_q_tile_of_every_entry_gets_one_block(bq, seed):
    rng = np.random.default_rng(seed)
    batch = int(rng.integers(1, 9))
    lens = rng.integers(0, 3 * bq, batch) * (rng.random(batch) < 0.8)  # some entries empty
    if seed == 0:
        lens = np.array([0] * (batch - 1) + [5 * bq])  # one entry holds every token
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    tokens = int(cu[-1])
    seen = [packed.block_entry(cu, tokens, bq, x) for x in range(packed.slots(tokens, batch, bq))]
    got = sorted((b, qt) for b, _, qt in filter(None, seen))
    want = [(b, qt) for b in range(batch) for qt in range(-(-int(lens[b]) // bq))]
    assert got == want
    assert all(tok0 == cu[b] for b, tok0, _ in filter(None, seen))
    assert sum(x is None for x in seen) <= batch + 1  # at most about one idle slot an entry


@pytest.mark.parametrize("kw", [{}, {"causal": True}, {"window": (40, 9)}, {"causal": True, "window": (100, 0)}],
                         ids=["full", "causal", "window", "causal-window"])
@pytest.mark.parametrize("bq,bk", [(128, 128), (64, 96), (128, 176)])
def test_key_tiles_are_the_plans_of_the_entry(kw, bq, bk):
    for n in (1, 63, 64, 127, 128, 129, 300, 513):
        entry = _op((n,), 600, **kw).entry(n)
        plan = tile_plan(entry, bq, bk)
        from tracea.emitters.cuda.attention_plan import mask_scalars

        sc = mask_scalars(_op((n,), 600, **kw))
        far = sc["seq_q"] + sc["seq_k"]
        wl = 2 * n if sc["win_left"] >= far else sc["win_left"]
        wr = 2 * n if sc["win_right"] >= far else sc["win_right"]
        for qt in range(plan.q_tiles):
            got = packed.key_tiles(n, qt, bq, bk, sc["diag"], wl, wr)
            want = plan.entries(qt)
            assert [t for t, _ in got] == [t for t, _ in want], (n, qt)
            # the packed form may test a full tile's elements (never skip a partial tile's)
            assert all(p or not wp for (_, p), (_, wp) in zip(got, want, strict=True)), (n, qt)


MODEL_CASES = [
    (_op((0, 1, 77, 200), 200, heads=4, kv_heads=2, causal=True), 64, 64),
    (_op((130, 3, 100), 160), 128, 96),
    (_op((1, 90, 0, 45), 90, heads=4, kv_heads=1, causal=True, window=(16, 0)), 64, 32),
    (_op((33, 70), 100, window=(10, 6)), 64, 48),
    (_op((300,), 300, causal=True), 128, 128),
]


@pytest.mark.parametrize("op,bq,bk", MODEL_CASES, ids=lambda x: getattr(x, "signature", str(x))[:50])
def test_the_kernels_indexing_computes_the_reference(op, bq, bk):
    inputs = op.random_inputs(np.random.default_rng(3))
    out, lse, visits = packed.model(op, inputs, bq, bk)
    ref, ref_lse = op.reference_with_lse(inputs)
    assert (visits == 1).all()
    assert relative_error(out, ref) < 1e-12
    assert lse_error(lse.astype(np.float32), ref_lse) < 1e-5


def test_offsets_other_than_the_ops_are_read():
    """The kernel reads the offsets it is given, not the lengths its op was planned with."""
    op = _op((50, 50, 50), 150, causal=True)
    other = _op((0, 120, 30), 150, causal=True)
    inputs = other.random_inputs(np.random.default_rng(4))
    out, _, visits = packed.model(op, inputs, 64, 64)
    assert (visits == 1).all()
    assert relative_error(out, other.reference_with_lse(inputs)[0]) < 1e-12
    shifted = dict(inputs, cu_seqlens=np.array([0, 1, 121, 150], np.int32))
    assert relative_error(packed.model(op, shifted, 64, 64)[0], other.reference_with_lse(inputs)[0]) > 0.1


def test_bad_offsets_stay_inside_the_tokens():
    """Unchecked offsets (decreasing, past the tokens, negative) are clamped: every row read and written is
    inside [0, tokens) (the model indexes its arrays without wrapping: a row past the end raises), entries that
    overlap write a row once each."""
    op = _op((40, 40, 40), 120)
    inputs = op.random_inputs(np.random.default_rng(5))
    for cu in ([0, 90, 30, 120], [-5, 10, 500, 120], [7, 7, 7, 7], [0, 200, 300, 400], [130, 140, -1, 0]):
        out, _, visits = packed.model(op, dict(inputs, cu_seqlens=np.array(cu, np.int32)), 64, 64)
        assert np.isfinite(out).all() and visits.max() <= 3


def test_the_render_is_the_packed_form():
    op = _op((1000, 24, 0, 500), 1024, heads=8, d=128, kv_heads=2, causal=True)
    sched = hero_schedule(op)
    assert not sched.persistent
    r, scalars = render(op, sched)
    assert r.params[-5:] == ("cu_seqlens", "tokens", "tmQ", "tmK", "tmV") and scalars["tokens"] == 1524
    assert r.grid[0] == (1524 // sched.bq + 4) * 8
    assert "cu_seqlens" in r.source and "tile_idx[e0" not in r.source and r.name.endswith("_packed")
    assert "int cap_q, int cap_k" in r.source


def test_what_the_packed_form_refuses():
    op = _op((64, 64), 64, d=64)
    assert not hero_schedule(op).persistent  # the short-item persistent hero of head dim 64 is not taken
    with pytest.raises(BadInputError, match="persistent"):
        dataclasses.replace(AttnWgmmaSchedule(bk=128, stages=2), persistent=True).validate(op)


def test_short_packed_entries_go_to_the_hopper_kernel_not_decode():
    """A capacity of at most 16 tokens (the decode core's query range) is still packed prefill: the Hopper core."""
    from tracea.emitters import cuda
    from tracea.emitters.cuda import cores

    v = cuda.resolve("cuda-wgmma.attention")
    for cap in (1, 8, 16, 17, 300):
        assert cores.hero_core(v, _op((cap, 1), cap, causal=True)).name == "wgmma-attention", cap


@pytest.mark.parametrize("d", range(32, 257, 8))
def test_the_host_maps_box_is_the_kernels_chunk_at_every_head_dim(d):
    """The kernel loads padded_dim(d) in chunks of its own width and expects that many bytes a box; the host's
    maps must use the same box and swizzle (a mismatch hangs the kernel on its mbarrier, d56/88/120/... before)."""
    import re

    from tracea.emitters.cuda.hopper.attention_device import padded_dim, tma_box

    for op in (Attention(1, 2, 200, d, dtype="fp16"), _op((130, 70), 130, d=d, causal=True)):
        r, _ = render(op, hero_schedule(op))
        loop = re.search(r"for \(int c = 0; c < (\d+); \+\+c\)\s*\n\s*tr_tma_load_3d\([^;]*&tmQ, c \* (\d+),", r.source)
        chunks, chunk = int(loop.group(1)), int(loop.group(2))
        assert (chunk, f"{2 * chunk}B") == tma_box(d) and chunks * chunk == padded_dim(d), (d, chunks, chunk)
