"""The Attention op of the IR: validation names the field, the reference matches the definition written
out naively (mask pair by pair, softmax without chunks), the counts match brute-force counting, and the
chunked reference stays small in memory."""

from __future__ import annotations

import itertools
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracea.doctor.errors import BadInputError
from tracea.kernels import OPS, Attention, DType, Op, canonical_op_name, relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops import attention as attention_module
from tracea.kernels.ops.attention import LSE_TOLERANCE, lse_error


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Attention(1, 6, 16, 64, kv_heads=4), "kv_heads"),
        (lambda: Attention(1, 4, 16, 64, kv_heads=0), "kv_heads"),
        (lambda: Attention(0, 4, 16, 64), "batch"),
        (lambda: Attention(1, 0, 16, 64), "heads"),
        (lambda: Attention(1, 4, 0, 64), "seq_q"),
        (lambda: Attention(1, 4, 16, 64, seq_k=0), "seq_k"),
        (lambda: Attention(1, 4, 16, 0), "head_dim"),
        (lambda: Attention(1, 4, 16, 300), "head_dim"),
        (lambda: Attention(1, 4, 16, 60), "head_dim"),
        (lambda: Attention(1, 4, 16, 264), "head_dim"),
        (lambda: Attention(1, 4, 16, 64, dtype="fp8"), "dtype"),
        (lambda: Attention(1, 4, 16, 64, causal="yes"), "causal"),
        (lambda: Attention(1, 4, 16, 64, scale=0.0), "scale"),
        (lambda: Attention(1, 4, 16, 64, scale=float("inf")), "scale"),
        (lambda: Attention(1, 4, 16, 64, window=(-1, 4)), "window"),
        (lambda: Attention(1, 4, 16, 64, window=-2), "window"),
        (lambda: Attention(1, 4, 16, 64, window=(1, 2, 3)), "window"),
        (lambda: Attention(1, 4, 16, 64, block_size=0), "block_size"),
        (lambda: Attention(1, 4, 300, 64, block_mask=np.ones((2, 3), bool)), "block_mask"),
        (lambda: Attention(1, 4, 300, 64, block_mask=np.ones((3, 3), np.float32)), "block_mask"),
        (lambda: Attention(1, 4, 300, 64, block_mask=np.ones(9, bool)), "block_mask"),
        (lambda: Attention(1, 4, 300, 64, block_mask=["111", "11", "111"]), "block_mask"),
        (lambda: Attention(1, 4, 300, 64, block_mask=["111", "1x1", "111"]), "block_mask"),
        (lambda: Attention(1, 4, 300, 64, block_mask=[[1, 1, 1]] * 3), "block_mask"),
        (lambda: Attention(2**20, 2**10, 2**10, 256), "q (batch"),
    ],
)
def test_bad_fields_name_the_field_in_one_line(build, field):
    with pytest.raises(BadInputError) as info:
        build()
    assert info.value.message.startswith(field) and "\n" not in info.value.message


def test_defaults_aliases_and_the_design_documents_spelling():
    op = Attention(2, 8, 100, 128, dtype="BF16")
    assert (op.kv_heads, op.seq_k, op.dtype, op.scale) == (8, 100, DType.BF16, 1 / math.sqrt(128))
    assert Attention(2, 8, 100, 128, dtype="bf16", scale=1 / math.sqrt(128)) == op
    assert canonical_op_name("flash_attention_2") == "attention" == canonical_op_name(" Attention ")
    assert OPS[canonical_op_name("FLASH_ATTENTION_2")] is Attention
    assert canonical_op_name("gemm") == "gemm" and canonical_op_name("pooling") == "pooling"
    data = {**op.to_json(), "op": "flash_attention_2"}
    assert Op.from_json(data) == op
    assert Attention(1, 1, 8, 8, block_mask=[[True]], block_size=(64, 32)).block_size == (64, 32)


def _naive_keep(op: Attention) -> np.ndarray:
    """The mask by its definition, pair by pair (bottom-right aligned diagonal)."""
    keep = np.zeros((op.seq_q, op.seq_k), bool)
    bm = op.block_mask_array()
    for i, j in itertools.product(range(op.seq_q), range(op.seq_k)):
        d = j - i - (op.seq_k - op.seq_q)
        ok = not (op.causal and d > 0)
        if op.window is not None:
            ok = ok and -op.window[0] <= d <= op.window[1]
        if bm is not None:
            ok = ok and bool(bm[i // op.block_size[0], j // op.block_size[1]])
        keep[i, j] = ok
    return keep


def _naive_attention(op: Attention, inputs) -> tuple[np.ndarray, np.ndarray]:
    """softmax(Q K^T * scale + mask) V head by head, row by row, in float64; lse = ln sum exp."""
    q, k, v = (to_float64(inputs[n], op.dtype) for n in ("q", "k", "v"))
    keep = _naive_keep(op)
    out = np.zeros(op.output_shape())
    lse = np.full(op.lse_shape(), -np.inf)
    group = op.heads // op.kv_heads
    for b, h, i in itertools.product(range(op.batch), range(op.heads), range(op.seq_q)):
        js = np.flatnonzero(keep[i])
        if js.size == 0:
            continue
        s = np.array([q[b, h, i] @ k[b, h // group, j] for j in js]) * op.scale
        w = np.exp(s - s.max())
        out[b, h, i] = (w / w.sum()) @ v[b, h // group, js]
        lse[b, h, i] = s.max() + math.log(w.sum())
    return out, lse


RNG = np.random.default_rng(17)
CASES = [
    Attention(1, 1, 1, 8),
    Attention(2, 2, 17, 64, dtype="fp16"),
    Attention(1, 4, 33, 8, seq_k=45, kv_heads=2, dtype="bf16"),
    Attention(1, 4, 33, 64, seq_k=45, kv_heads=2, causal=True),
    Attention(1, 2, 45, 8, seq_k=33, causal=True),  # seq_q > seq_k: the first 12 rows keep no key
    Attention(1, 2, 17, 8, seq_k=1, causal=True),
    Attention(2, 4, 33, 16, seq_k=45, kv_heads=1, window=(5, 3)),
    Attention(1, 2, 33, 8, seq_k=45, causal=True, window=(4, 9), scale=0.3),
    Attention(1, 2, 33, 8, seq_k=45, kv_heads=1, block_size=(8, 16), block_mask=RNG.random((5, 3)) < 0.5),
    Attention(1, 2, 33, 8, seq_k=45, causal=True, window=(20, 0), block_size=16,
              block_mask=[[True, False, True], [False, False, False], [True, True, False]]),
]


@pytest.mark.parametrize("op", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_reference_against_the_naive_definition(op):
    inputs = op.random_inputs(np.random.default_rng(5))
    out, lse = op.reference_with_lse(inputs)
    want_out, want_lse = _naive_attention(op, inputs)
    assert out.shape == op.output_shape() and lse.shape == op.lse_shape()
    assert np.allclose(out, want_out, rtol=1e-12, atol=1e-12)
    assert np.array_equal(np.isneginf(lse), np.isneginf(want_lse))
    finite = np.isfinite(want_lse)
    assert np.allclose(lse[finite], want_lse[finite], rtol=1e-12, atol=1e-12)
    assert np.array_equal(op.reference(inputs), out) and np.array_equal(op.reference_lse(inputs), lse)
    assert lse_error(lse, want_lse) < 1e-12


def test_fully_masked_rows_give_zero_output_and_minus_infinite_lse():
    op = Attention(1, 2, 45, 8, seq_k=33, causal=True)
    out, lse = op.reference_with_lse(op.random_inputs(np.random.default_rng(2)))
    assert np.all(out[:, :, :12] == 0) and np.all(np.isneginf(lse[:, :, :12]))
    assert np.all(np.isfinite(lse[:, :, 12:])) and np.count_nonzero(out[:, :, 12:]) == out[:, :, 12:].size
    blocked = CASES[-1]  # the second q block of its block mask keeps nothing
    out, lse = blocked.reference_with_lse(blocked.random_inputs(np.random.default_rng(3)))
    assert np.all(out[:, :, 16:32] == 0) and np.all(np.isneginf(lse[:, :, 16:32]))


@given(sq=st.integers(1, 40), sk=st.integers(1, 40), causal=st.booleans(),
       window=st.one_of(st.none(), st.tuples(st.integers(0, 12), st.integers(0, 12))),
       bq=st.integers(1, 16), bk=st.integers(1, 16), masked=st.booleans(), seed=st.integers(0, 2**16))
@settings(max_examples=150, deadline=None)
def test_counts_against_brute_force(sq, sk, causal, window, bq, bk, masked, seed):
    nq, nk = -(-sq // bq), -(-sk // bk)
    bm = np.random.default_rng(seed).random((nq, nk)) < 0.6 if masked else None
    op = Attention(2, 6, sq, 8, seq_k=sk, kv_heads=3, causal=causal, window=window, block_mask=bm,
                   block_size=(bq, bk))
    keep = _naive_keep(op)
    assert op.kept_pairs == int(keep.sum())
    assert op.flops == 4 * 2 * 6 * 8 * int(keep.sum())
    assert op.density == pytest.approx(keep.sum() / (sq * sk))
    computed = sum(keep[a * bq:(a + 1) * bq, b * bk:(b + 1) * bk].any() for a in range(nq) for b in range(nk))
    assert op.tile_counts() == (2 * 6 * nq * nk, 2 * 6 * computed)
    assert (op.tiles_total, op.tiles_computed) == op.tile_counts()
    if not masked:  # another tile size for the same mask
        computed = sum(keep[a * 5:(a + 1) * 5, b * 7:(b + 1) * 7].any()
                       for a in range(-(-sq // 5)) for b in range(-(-sk // 7)))
        assert op.tile_counts((5, 7))[1] == 2 * 6 * computed


def test_counts_at_scale():
    dense = Attention(4, 32, 4096, 128, dtype="bf16")
    assert dense.flops == 4 * 4 * 32 * 4096 * 4096 * 128 and dense.tiles_computed == dense.tiles_total
    causal = Attention(4, 32, 4096, 128, dtype="bf16", causal=True)
    assert causal.kept_pairs == 4096 * 4097 // 2
    assert causal.tiles_computed == 4 * 32 * 32 * 33 // 2  # the diagonal tiles are computed too
    window = Attention(1, 32, 16384, 128, window=(1024, 1024))
    assert window.kept_pairs == sum(min(16383, i + 1024) - max(0, i - 1024) + 1 for i in range(16384))
    assert window.tiles_computed < window.tiles_total // 5
    gqa = Attention(1, 32, 16384, 128, kv_heads=8, dtype="bf16")
    q = 16384 * 128 * 32
    assert gqa.bytes == (2 * q + 2 * q // 4) * 2 + 32 * 16384 * 4
    with pytest.raises(BadInputError, match="block: a block mask"):
        Attention(1, 1, 256, 64, block_mask=np.ones((2, 2), bool)).tile_counts((64, 64))


def test_json_round_trip_and_signature():
    bm = np.random.default_rng(4).random((3, 2)) < 0.5
    ops = [Attention(2, 8, 300, 64, seq_k=200, kv_heads=2, dtype="fp16", causal=True, window=(16, 0), scale=0.2),
           Attention(1, 4, 300, 128, seq_k=200, block_mask=bm),
           Attention(1, 1, 1, 8)]
    for op in ops:
        back = Op.from_json(op.to_json())
        assert back == op and back.signature == op.signature and hash(back) == hash(op)
    assert ops[1].to_json()["block_mask"] == ["".join("1" if b else "0" for b in row) for row in bm]
    flipped = bm.copy()
    flipped[0, 0] = not flipped[0, 0]
    other = Attention(1, 4, 300, 128, seq_k=200, block_mask=flipped)
    assert other.signature != ops[1].signature and "sha256:" in other.signature
    assert len(other.signature) < 300


def test_chunked_reference_equals_unchunked():
    op = Attention(1, 4, 300, 32, seq_k=260, kv_heads=2, causal=True, window=(100, 0), block_size=64,
                   block_mask=np.random.default_rng(6).random((5, 5)) < 0.7)
    inputs = op.random_inputs(np.random.default_rng(7))
    whole = op.reference_with_lse(inputs, chunk_rows=300)
    for rows in (1, 7, 128):
        part = op.reference_with_lse(inputs, chunk_rows=rows)
        assert np.allclose(part[0], whole[0], rtol=1e-13, atol=1e-15)
        assert np.array_equal(np.isneginf(part[1]), np.isneginf(whole[1]))
        assert np.allclose(part[1][np.isfinite(part[1])], whole[1][np.isfinite(whole[1])], rtol=1e-13)


def test_reference_memory_stays_in_chunks(monkeypatch):
    monkeypatch.setattr(attention_module, "REFERENCE_CHUNK_BYTES", 2**20)
    op = Attention(1, 1, 4096, 8)
    inputs = op.random_inputs(np.random.default_rng(8))
    tracemalloc.start()
    try:
        op.reference(inputs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20 < 4096 * 4096 * 8  # a few 1 MiB score blocks, never the 128 MiB of all scores


def test_inputs_tolerance_and_lse_error():
    op = Attention(1, 4, 64, 64, kv_heads=2, dtype="bf16")
    a, b = op.random_inputs(np.random.default_rng()), op.random_inputs(np.random.default_rng())
    assert {n: x.shape for n, x in a.items()} == op.shapes() and a["q"].dtype == np.uint16
    assert not np.array_equal(a["q"], b["q"]) and all(np.count_nonzero(x) == x.size for x in a.values())
    assert tolerance(Attention(1, 1, 8, 8)) < tolerance(Attention(1, 1, 8, 8, dtype="fp16")) < tolerance(op)
    ref = op.reference(a)
    assert relative_error(ref * (1 + tolerance(op) / 2), ref) < tolerance(op)
    lse = np.array([[-np.inf, 1.0, 2.0]])
    err = lse_error(lse + np.array([[0, 1e-4, -2e-4]]), lse)
    assert err == pytest.approx(2e-4) and err < LSE_TOLERANCE
    assert lse_error(np.array([[0.0, 1.0, 2.0]]), lse) == math.inf  # a row that keeps no key must say -inf
    assert lse_error(np.array([[-np.inf, np.nan, 2.0]]), lse) == math.inf
    assert lse_error(lse[:, :2], lse) == math.inf


# ---- serving: per-entry lengths and paged caches ----------------------------------------------------------

SERVING = [
    dict(batch=3, heads=4, kv_heads=2, seq_q=2, head_dim=16, seq_k=50, causal=True, seq_lens=(50, 17, 0), page_size=16),
    dict(batch=2, heads=2, seq_q=5, head_dim=8, seq_k=40, window=(6, 1), seq_lens=(40, 3)),
    dict(batch=2, heads=6, kv_heads=3, seq_q=1, head_dim=24, seq_k=70, page_size=24, pages=9, dtype="bf16"),
    dict(batch=4, heads=2, seq_q=3, head_dim=8, seq_k=33, causal=True, seq_lens=(1, 2, 33, 20), page_size=5),
]


def _naive_serving(op: Attention, inputs: dict) -> np.ndarray:
    """The definition written out key by key: entry b's key t is row t % P of page table[b, t // P] (or k[b,
    :, t]), kept when t < len_b and -left <= t - i - (len_b - seq_q) <= right."""
    q, k, v = (to_float64(np.asarray(inputs[n]), op.dtype) for n in ("q", "k", "v"))
    lens = inputs.get("seq_lens", np.full(op.batch, op.seq_k))
    left, right = op._bounds()
    out = np.zeros(op.output_shape())
    group = op.heads // op.kv_heads
    for b in range(op.batch):
        for h in range(op.heads):
            for i in range(op.seq_q):
                keep, rows_k, rows_v = [], [], []
                for t in range(int(lens[b])):
                    d = t - i - (int(lens[b]) - op.seq_q)
                    if -left <= d <= right:
                        if op.page_size:
                            page = inputs["block_table"][b, t // op.page_size]
                            rows_k.append(k[page, t % op.page_size, h // group])
                            rows_v.append(v[page, t % op.page_size, h // group])
                        else:
                            rows_k.append(k[b, h // group, t])
                            rows_v.append(v[b, h // group, t])
                        keep.append(t)
                if not keep:
                    continue
                s = np.array(rows_k) @ q[b, h, i] * op.scale
                p = np.exp(s - s.max())
                out[b, h, i] = p @ np.array(rows_v) / p.sum()
    return out


@pytest.mark.parametrize("case", SERVING, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_serving_reference_against_the_naive_definition(case):
    op = Attention(**case)
    inputs = op.random_inputs(np.random.default_rng(4))
    assert set(inputs) == set(op.shapes()) and all(inputs[n].shape == s for n, s in op.shapes().items())
    assert all(inputs[n].dtype == op.input_dtype(n) for n in inputs)
    out, lse = op.reference_with_lse(inputs)
    assert np.abs(out - _naive_serving(op, inputs)).max() <= 1e-12
    empty = [b for b, n in enumerate(op.key_lens) if n == 0]
    assert all((out[b] == 0).all() and np.isneginf(lse[b]).all() for b in empty)
    if op.page_size:  # the pages are dealt in a random order, each used once, the rest of the table -1
        table = inputs["block_table"]
        used = table[table >= 0]
        assert len(set(used.tolist())) == used.size == sum(-(-n // op.page_size) for n in op.key_lens)
        assert not np.array_equal(np.sort(used), used) or used.size <= 1


def test_serving_counts_are_each_entrys_own():
    op = Attention(batch=3, heads=4, kv_heads=2, seq_q=2, head_dim=16, seq_k=50, causal=True, seq_lens=(50, 17, 0),
                   page_size=16)
    one = [Attention(batch=1, heads=4, kv_heads=2, seq_q=2, head_dim=16, seq_k=n, causal=True) for n in (50, 17)]
    assert op.pairs_computed == sum(e.kept_pairs for e in one)
    assert op.flops == sum(e.flops for e in one)
    assert op.tile_counts((16, 16))[1] == sum(e.tile_counts((16, 16))[1] for e in one)
    assert op.bytes == (2 * 3 * 4 * 2 * 16 + 2 * 67 * 2 * 16) * 4 + 4 * 3 * 4 * 2 + 4 * (4 + 2) + 4 * 3
    assert Attention.from_json(op.to_json()) == op
    long = Attention(batch=12, heads=1, seq_q=1, head_dim=8, seq_k=9, seq_lens=(9,) * 12)
    assert "sha256:" in long.signature and "seq_lens" in long.signature


@pytest.mark.parametrize(("fields", "words"), [
    (dict(seq_lens=(51, 1, 1)), ["seq_lens[0]", "51"]),
    (dict(seq_lens=(1, 1)), ["seq_lens", "3"]),
    (dict(seq_lens=(1, -1, 1)), ["seq_lens[1]"]),
    (dict(page_size=16, pages=0), ["pages", "positive"]),
    (dict(pages=4), ["pages", "page_size"]),
    (dict(page_size=0), ["page_size"]),
    (dict(page_size=16, block_size=(16, 16), block_mask=[[True] * 4] * 1), ["block_mask", "seq_lens or page_size"]),
])
def test_bad_serving_fields_name_the_field(fields, words):
    with pytest.raises(BadInputError) as e:
        Attention(batch=3, heads=4, kv_heads=2, seq_q=2, head_dim=16, seq_k=50, **fields)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_serving_inputs_are_checked_before_any_use():
    """A used table entry outside the pool or a length past the capacity is refused (the reference, and every
    kernel, checks through check_serving_inputs); an entry past an entry's pages is never read."""
    op = Attention(batch=3, heads=4, kv_heads=2, seq_q=2, head_dim=16, seq_k=50, seq_lens=(50, 17, 0), page_size=16)
    inputs = op.random_inputs(np.random.default_rng(2))
    table = inputs["block_table"].copy()
    table[1, 1] = op.pages
    with pytest.raises(BadInputError, match=r"block_table\[1, 1\]: page 12 is outside the pool of 12"):
        op.reference({**inputs, "block_table": table})
    table[1, 1], table[1, 2] = inputs["block_table"][1, 1], 10**6  # column 2 is past entry 1's 17 keys
    assert np.array_equal(op.reference({**inputs, "block_table": table}), op.reference(inputs))
    with pytest.raises(BadInputError, match=r"seq_lens\[2\]: 51 keys, outside 0..50"):
        op.reference({**inputs, "seq_lens": np.array([50, 17, 51], np.int32)})
    with pytest.raises(BadInputError, match="missing 'seq_lens'"):
        op.reference({n: x for n, x in inputs.items() if n != "seq_lens"})
    with pytest.raises(BadInputError, match="block_table: expected an integer array"):
        op.reference({**inputs, "block_table": inputs["block_table"].astype(np.float32)})
    # the lengths the inputs give are the ones computed, not the field's
    shorter = {**inputs, "seq_lens": np.array([20, 17, 0], np.int32)}
    assert np.abs(op.reference(shorter) - _naive_serving(op, shorter)).max() <= 1e-12


# ---- packed entries (variable-length prefill) -------------------------------------------------------------

PACKED = [
    dict(batch=3, heads=4, kv_heads=2, seq_q=20, seq_k=20, head_dim=8, causal=True, seq_lens=(20, 7, 0), packed=True),
    dict(batch=2, heads=2, seq_q=30, seq_k=30, head_dim=16, window=(3, 1), seq_lens=(1, 30), packed=True,
         dtype="bf16"),
    dict(batch=2, heads=2, seq_q=40, seq_k=40, head_dim=8, seq_lens=(9, 13), packed=True),  # capacity past both
]


def _naive_packed(op: Attention, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """Entry b's rows [cu[b], cu[b + 1]) of q against the same rows of k and v, key by key."""
    q, k, v = (to_float64(np.asarray(inputs[n]), op.dtype) for n in ("q", "k", "v"))
    cu = inputs["cu_seqlens"]
    left, right = op._bounds()
    out, lse = np.zeros(op.output_shape()), np.full(op.lse_shape(), -np.inf)
    group = op.heads // op.kv_heads
    for b in range(op.batch):
        a, n = int(cu[b]), int(cu[b + 1] - cu[b])
        for h in range(op.heads):
            for i in range(n):
                js = [j for j in range(n) if -left <= j - i <= right]
                if not js:
                    continue
                s = np.array([k[a + j, h // group] @ q[a + i, h] for j in js]) * op.scale
                p = np.exp(s - s.max())
                out[a + i, h] = p @ np.array([v[a + j, h // group] for j in js]) / p.sum()
                lse[h, a + i] = s.max() + math.log(p.sum())
    return out, lse


@pytest.mark.parametrize("case", PACKED, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_packed_reference_against_the_naive_definition(case):
    op = Attention(**case)
    total = sum(case["seq_lens"])
    assert op.shapes() == {"q": (total, op.heads, op.head_dim), "k": (total, op.kv_heads, op.head_dim),
                           "v": (total, op.kv_heads, op.head_dim), "cu_seqlens": (op.batch + 1,)}
    assert op.output_shape() == (total, op.heads, op.head_dim) and op.lse_shape() == (op.heads, total)
    inputs = op.random_inputs(np.random.default_rng(6))
    assert inputs["cu_seqlens"].dtype == np.int32 and list(inputs["cu_seqlens"]) == [0, *np.cumsum(case["seq_lens"])]
    out, lse = op.reference_with_lse(inputs)
    want, want_lse = _naive_packed(op, inputs)
    assert np.abs(out - want).max() <= 1e-12 and lse_error(lse, want_lse) <= 1e-12
    one = [Attention(batch=1, heads=op.heads, kv_heads=op.kv_heads, seq_q=n, head_dim=op.head_dim, causal=op.causal,
                     window=op.window) for n in case["seq_lens"] if n]
    assert op.flops == sum(e.flops for e in one)
    assert Attention.from_json(op.to_json()) == op and "packed=True" in op.signature


@pytest.mark.parametrize(("fields", "words"), [
    (dict(packed=True), ["packed", "seq_lens"]),
    (dict(packed=True, seq_lens=(20, 3), page_size=16), ["packed", "no page_size"]),
    (dict(packed=True, seq_lens=(20, 3), seq_k=30), ["packed", "seq_q = seq_k"]),
    (dict(packed=True, seq_lens=(0, 0)), ["every packed entry is empty"]),
    (dict(packed="yes", seq_lens=(20, 3)), ["packed", "true or false"]),
])
def test_bad_packed_fields_name_the_field(fields, words):
    with pytest.raises(BadInputError) as e:
        Attention(**{**dict(batch=2, heads=2, seq_q=20, head_dim=8), **fields})
    assert all(w in str(e.value) for w in words), str(e.value)


def test_packed_offsets_are_checked():
    op = Attention(**PACKED[0])
    inputs = op.random_inputs(np.random.default_rng(1))
    for cu, words in (([0, 20, 19, 27], "must not decrease"), ([0, 20, 27, 28], "expected 0 to 27"),
                      ([1, 20, 27, 27], "expected 0 to 27"), ([0, 27, 27, 27], "more than seq_k=20")):
        with pytest.raises(BadInputError, match=words):
            op.reference({**inputs, "cu_seqlens": np.array(cu, np.int32)})
    moved = {**inputs, "cu_seqlens": np.array([0, 7, 27, 27], np.int32)}  # the offsets given, not the field's
    assert np.abs(op.reference(moved) - _naive_packed(op, moved)[0]).max() <= 1e-12


def test_a_pool_smaller_than_the_entries_pages_shares_them():
    """Entries may share pages (a common prefix): a pool of fewer pages than the entries use is valid, its pages
    dealt again; the reference reads each entry through its own table row."""
    op = Attention(batch=3, heads=2, seq_q=1, head_dim=8, seq_k=40, page_size=8, pages=4, seq_lens=(40, 17, 30))
    inputs = op.random_inputs(np.random.default_rng(3))
    used = inputs["block_table"][inputs["block_table"] >= 0]
    assert used.size == 5 + 3 + 4 and set(used.tolist()) == set(range(4))
    assert np.abs(op.reference(inputs) - _naive_serving(op, inputs)).max() <= 1e-12
