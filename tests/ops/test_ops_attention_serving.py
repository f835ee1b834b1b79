"""``tracea.ops.attention`` on a serving batch without a GPU: per-entry lengths and a paged cache on NumPy
arrays and torch CPU tensors, against the float64 reference of the same arrays; the prepared call reads new
lengths and pages at each call; every bad table, length, dtype, shape or placement is one BadInputError before
anything runs."""

from __future__ import annotations

import numpy as np
import pytest

import tracea
from tracea.doctor.errors import BadInputError
from tracea.kernels import relative_error, tolerance
from tracea.kernels.ops.attention import Attention

OPS = [
    Attention(batch=3, heads=8, kv_heads=2, seq_q=2, head_dim=64, seq_k=64, causal=True, seq_lens=(64, 17, 0),
              page_size=16),
    Attention(batch=3, heads=4, seq_q=1, head_dim=32, seq_k=100, seq_lens=(100, 3, 50)),
    Attention(batch=2, heads=4, kv_heads=1, seq_q=3, head_dim=32, seq_k=72, window=(10, 0), page_size=24, pages=9),
]


def _call(op, x, **kw):
    extra = {n: x[n] for n in ("block_table", "seq_lens") if n in x}
    return tracea.ops.attention(x["q"], x["k"], x["v"], causal=op.causal, window=op.window, **extra, **kw)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.signature[:80])
def test_numpy_and_torch_cpu_match_the_reference(op):
    x = op.random_inputs(np.random.default_rng(0))
    ref = op.reference(x)
    assert relative_error(np.asarray(_call(op, x), np.float64), ref) <= tolerance(op)
    torch = pytest.importorskip("torch")
    t = {n: torch.from_numpy(a) for n, a in x.items()}
    assert relative_error(_call(op, t).double().numpy(), ref) <= tolerance(op)


def test_the_prepared_call_reads_new_lengths_and_pages():
    op = OPS[0]
    x = op.random_inputs(np.random.default_rng(1))
    tracea.ops.clear_cache()
    _call(op, x)
    free = sorted(set(range(op.pages)) - set(x["block_table"][x["block_table"] >= 0].tolist()))
    x["seq_lens"][:] = [3, 64, 30]
    x["block_table"][1] = free[:4]
    x["block_table"][2, :2] = free[4:6]
    assert relative_error(np.asarray(_call(op, x), np.float64), op.reference(x)) <= tolerance(op)


def _bad(op, x, **changes):
    return {**x, **changes}


@pytest.mark.parametrize(("change", "words"), [
    (lambda x, op: {"block_table": np.where(np.arange(4) == 1, op.pages, x["block_table"]).astype(np.int32)},
     [r"block_table[0, 1]: page 12", "outside the pool of 12 pages"]),
    (lambda x, op: {"seq_lens": np.array([64, 65, 0], np.int32)}, ["seq_lens[1]: 65 keys", "0..64"]),
    (lambda x, op: {"seq_lens": np.array([64, -1, 0], np.int32)}, ["seq_lens[1]: -1 keys"]),
    (lambda x, op: {"block_table": x["block_table"].astype(np.int64)}, ["block_table", "int32", "int64"]),
    (lambda x, op: {"seq_lens": x["seq_lens"].astype(np.float32)}, ["seq_lens", "int32"]),
    (lambda x, op: {"block_table": x["block_table"][:2]}, ["block_table (2, 4)", "B=3"]),
    (lambda x, op: {"seq_lens": x["seq_lens"][:2]}, ["seq_lens (2,)", "(3,)"]),
    (lambda x, op: {"block_table": np.asfortranarray(np.repeat(x["block_table"], 2, axis=1))[:, ::2]},
     ["block_table", "contiguous"]),
    (lambda x, op: {"k": x["k"][:, :, :1]}, ["q (3, 8, 2, 64)", "(pages, page_size, Hkv, D)"]),
])
def test_bad_serving_input_is_one_error_before_anything_runs(change, words):
    op = OPS[0]
    x = op.random_inputs(np.random.default_rng(2))
    with pytest.raises(BadInputError) as e:
        _call(op, {**x, **change(x, op)})
    assert all(w in str(e.value) for w in words), str(e.value)


def test_mixed_placement_and_block_masks_are_refused():
    torch = pytest.importorskip("torch")
    op = OPS[0]
    x = op.random_inputs(np.random.default_rng(3))
    t = {n: torch.from_numpy(a) for n, a in x.items()}
    with pytest.raises(BadInputError, match="block_table must be where q is"):
        tracea.ops.attention(t["q"], t["k"], t["v"], block_table=x["block_table"], seq_lens=t["seq_lens"])
    with pytest.raises(BadInputError, match="block_mask does not combine"):
        _call(op, x, block_mask=np.ones((1, 1), bool))


def test_unchecked_tables_never_read_outside_the_cache():
    """check_tables=False: a page past the pool and a length past the table are clamped into the cache, as the
    kernels clamp them: a result, no error and no read outside the arrays."""
    op = OPS[0]
    x = op.random_inputs(np.random.default_rng(4))
    table = x["block_table"].copy()
    table[0, 1] = 10**6
    y = _call(op, {**x, "block_table": table, "seq_lens": np.array([64, 10**6, 0], np.int32)}, check_tables=False)
    assert np.asarray(y).shape == op.output_shape() and np.isfinite(np.asarray(y, np.float64)).all()


PACKED = Attention(batch=3, heads=4, kv_heads=2, seq_q=40, seq_k=40, head_dim=32, causal=True, seq_lens=(40, 9, 0),
                   packed=True)


def test_packed_entries_match_the_reference_on_numpy_and_torch():
    op = PACKED
    x = op.random_inputs(np.random.default_rng(5))
    ref = op.reference(x)
    y = tracea.ops.attention(x["q"], x["k"], x["v"], causal=True, cu_seqlens=x["cu_seqlens"], max_seqlen=40)
    assert np.asarray(y).shape == op.output_shape()
    assert relative_error(np.asarray(y, np.float64), ref) <= tolerance(op)
    torch = pytest.importorskip("torch")
    t = {n: torch.from_numpy(a) for n, a in x.items()}
    y = tracea.ops.attention(t["q"], t["k"], t["v"], causal=True, cu_seqlens=t["cu_seqlens"])  # max_seqlen: total
    assert relative_error(y.double().numpy(), ref) <= tolerance(op)


@pytest.mark.parametrize(("change", "words"), [
    ({"cu_seqlens": np.array([0, 40, 39, 49], np.int32)}, ["cu_seqlens[2] = 39", "must not decrease"]),
    ({"cu_seqlens": np.array([0, 40, 49, 50], np.int32)}, ["the offsets run from 0 to 50", "0 to 49"]),
    ({"cu_seqlens": np.array([0, 40, 49, 49], np.int64)}, ["cu_seqlens", "int32", "int64"]),
    ({"cu_seqlens": np.array([0, 49], np.int32), "max_seqlen": 40}, ["entry 0 holds 49 tokens", "max_seqlen=40"]),
    ({"max_seqlen": 0}, ["max_seqlen", "a positive integer"]),
    ({"block_table": np.zeros((3, 1), np.int32)}, ["cu_seqlens", "does not combine"]),
    ({"q": np.zeros((49, 4, 16), np.float32)}, ["packed entries take q (total, H, D)"]),
])
def test_bad_packed_input_is_one_error_before_anything_runs(change, words):
    x = PACKED.random_inputs(np.random.default_rng(6))
    args = {"q": x["q"], "k": x["k"], "v": x["v"], "cu_seqlens": x["cu_seqlens"], **change}
    with pytest.raises(BadInputError) as e:
        tracea.ops.attention(args.pop("q"), args.pop("k"), args.pop("v"), **args)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_no_tokens_is_an_empty_result_and_check_tables_is_a_flag():
    empty = tracea.ops.attention(np.zeros((0, 4, 32), np.float32), np.zeros((0, 2, 32), np.float32),
                                 np.zeros((0, 2, 32), np.float32), cu_seqlens=np.zeros(2, np.int32))
    assert empty.shape == (0, 4, 32) and tracea.ops.explain().path == "empty"
    x = OPS[1].random_inputs(np.random.default_rng(7))
    with pytest.raises(BadInputError, match="check_tables expected True or False"):
        tracea.ops.attention(x["q"], x["k"], x["v"], seq_lens=x["seq_lens"], check_tables="no")


def test_serving_calls_refuse_what_they_cannot_mean():
    """k's batch apart from q's, a list for q, an out over an index array, max_seqlen without cu_seqlens and a
    pool of no pages: each one BadInputError (before, a list raised AttributeError and k's batch of 1 gave a
    result of the wrong shape)."""
    x = OPS[1].random_inputs(np.random.default_rng(8))
    lens = x["seq_lens"]
    cases = [
        (lambda: tracea.ops.attention(x["q"], x["k"][:1], x["v"][:1], seq_lens=lens), "hold 1 batch entries, q 3"),
        (lambda: tracea.ops.attention(x["q"].tolist(), x["k"], x["v"], seq_lens=lens), "q: expected a NumPy array"),
        (lambda: tracea.ops.attention(x["q"], x["k"], x["v"], max_seqlen=4), "max_seqlen bounds packed entries"),
    ]
    for call, words in cases:
        with pytest.raises(BadInputError, match=words):
            call()
    buf = np.zeros(int(np.prod(OPS[1].output_shape())), np.float32)
    out = buf.reshape(OPS[1].output_shape())
    with pytest.raises(BadInputError, match="overlaps the input 'seq_lens'"):
        tracea.ops.attention(x["q"], x["k"], x["v"], seq_lens=buf[:3].view(np.int32), out=out)
    p = OPS[0].random_inputs(np.random.default_rng(9))
    with pytest.raises(BadInputError, match="a paged cache of no pages"):
        tracea.ops.attention(p["q"], p["k"][:0], p["v"][:0], block_table=p["block_table"], seq_lens=p["seq_lens"],
                             check_tables=False)


def test_a_paged_call_on_a_small_shared_pool_runs_the_kernel():
    """A pool of fewer pages than batch x table columns (entries sharing pages) is planned and run, not refused."""
    op = Attention(batch=4, heads=4, kv_heads=2, seq_q=1, head_dim=32, seq_k=64, page_size=16, pages=6,
                   seq_lens=(20, 5, 30, 16))
    x = op.random_inputs(np.random.default_rng(10))
    y = _call(op, x)
    assert tracea.ops.explain().path == "tracea"
    assert relative_error(np.asarray(y, np.float64), op.reference(x)) <= tolerance(op)


@pytest.mark.parametrize("op", OPS + [PACKED], ids=lambda op: op.signature[:80])
def test_the_vendor_fallbacks_match_the_reference(op):
    """The fallbacks (the path on CUDA for packed entries, and wherever a kernel refuses a call) on NumPy and on
    torch: each entry gathered through its pages or offsets, as the reference does."""
    from tracea.ops._functions.attention import packed_fallback, serving_fallback

    x = op.random_inputs(np.random.default_rng(11))
    ref = op.reference(x)
    torch = pytest.importorskip("torch")
    for arrays in (x, {n: torch.from_numpy(a) for n, a in x.items()}):
        if op.packed:
            y = packed_fallback(arrays["q"], arrays["k"], arrays["v"], op.scale, op.causal, op.window,
                                arrays["cu_seqlens"])
        else:
            y = serving_fallback(arrays["q"], arrays["k"], arrays["v"], op.scale, op.causal, op.window,
                                 arrays.get("block_table"), arrays.get("seq_lens"))
        got = y.double().numpy() if hasattr(y, "double") else np.asarray(y, np.float64)
        assert relative_error(got, ref) <= tolerance(op)


def test_an_odd_number_of_eights_runs_sdpa_on_cuda_and_the_kernel_on_the_cpu():
    """Head dim 72 on CUDA tensors is handed to SDPA (the CUDA kernels ran it slower, docs/benchmarks.md); the
    rule reads the arrays' device, so NumPy arrays at head dim 72 still run the CPU kernel, verified."""
    from types import SimpleNamespace

    from tracea.ops._engine import Fallback
    from tracea.ops._functions.attention import odd_eights

    with pytest.raises(Fallback, match="odd number of 8s"):
        odd_eights(SimpleNamespace(device="cuda"), 72)
    odd_eights(SimpleNamespace(device="cuda"), 80)
    odd_eights(SimpleNamespace(device="cpu"), 72)
    op = Attention(batch=1, heads=2, seq_q=40, head_dim=72, causal=True, dtype="fp32")
    x = op.random_inputs(np.random.default_rng(1))
    y = tracea.ops.attention(x["q"], x["k"], x["v"], causal=True)
    assert tracea.ops.explain().path == "tracea"
    assert relative_error(y, op.reference(x)) <= tolerance(op)
