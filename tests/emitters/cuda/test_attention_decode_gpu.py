"""The decode attention kernel on a GPU: O and lse against the float64 reference on fresh random inputs with a
NaN-poisoned output, over GQA and MHA, 1 to 16 queries, every head dim a model uses, causal and windows,
key counts that end inside a tile, row tiles past the first, and one to many key slices; two launches give
the same bits (the slices merge in a fixed order and the counters are back at zero); ``tracea.ops`` picks it
for a decode call on torch tensors."""

from __future__ import annotations

import numpy as np
import pytest
from test_cuda_attention_gpu import _gpu_or_skip, assert_matches_reference

from tracea.kernels.ops.attention import Attention

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


CASES = [
    (Attention(2, 8, 1, 128, seq_k=1000, kv_heads=2, dtype="bf16"), {}),
    (Attention(1, 32, 1, 128, seq_k=20000, kv_heads=8, dtype="bf16"), {}),
    (Attention(3, 4, 1, 64, seq_k=4097, dtype="fp16"), {}),  # MHA, a key past the last full tile
    (Attention(1, 4, 5, 64, seq_k=300, kv_heads=1, dtype="fp16", causal=True), {"warps": 2, "kw": 2}),
    (Attention(1, 32, 16, 128, seq_k=3000, kv_heads=8, dtype="bf16", causal=True), {}),  # 64 rows: 4 row tiles
    (Attention(1, 40, 1, 64, seq_k=4096, kv_heads=2, dtype="bf16"), {"warps": 2}),  # 20 rows: a part-filled tile
    (Attention(2, 2, 3, 80, seq_k=777, kv_heads=2, dtype="bf16", window=(100, 0)), {"warps": 8}),
    (Attention(2, 8, 1, 96, seq_k=5000, kv_heads=2, dtype="bf16"), {}),
    (Attention(1, 6, 7, 160, seq_k=2049, kv_heads=3, dtype="fp16", window=(300, 5)), {}),
    (Attention(2, 8, 1, 256, seq_k=3333, kv_heads=8, dtype="bf16"), {}),
    (Attention(1, 4, 2, 32, seq_k=50, kv_heads=2, dtype="bf16"), {}),  # fewer keys than a tile
    (Attention(1, 8, 16, 64, seq_k=10, kv_heads=8, dtype="fp16", causal=True), {}),  # rows keeping no key
    (Attention(1, 8, 1, 128, seq_k=8192, kv_heads=2, dtype="bf16"), {"split": 1}),
    (Attention(1, 8, 1, 128, seq_k=8192, kv_heads=2, dtype="bf16"), {"split": 64, "stages": 2}),
    (Attention(1, 8, 1, 64, seq_k=8192, kv_heads=2, dtype="bf16", window=(256, 0)), {"split": 3}),
    # serving: lengths per entry (none, one, a ragged tile end), pages shuffled in the pool (16, 64, 24 keys)
    (Attention(4, 32, 1, 128, seq_k=4096, kv_heads=8, dtype="bf16", seq_lens=(4096, 1, 0, 3001)), {}),
    (Attention(4, 32, 1, 128, seq_k=4096, kv_heads=8, dtype="bf16", seq_lens=(4096, 17, 2000, 3001),
               page_size=16), {}),
    (Attention(3, 8, 1, 64, seq_k=9000, kv_heads=8, dtype="fp16", page_size=64), {}),
    (Attention(2, 16, 4, 128, seq_k=2500, kv_heads=2, dtype="bf16", causal=True, seq_lens=(2500, 700),
               page_size=24, pages=300), {}),
    (Attention(3, 8, 2, 96, seq_k=1500, kv_heads=4, dtype="bf16", window=(200, 0), seq_lens=(1500, 150, 9),
               page_size=16), {"split": 5}),
    (Attention(2, 8, 1, 80, seq_k=1000, kv_heads=2, dtype="bf16", seq_lens=(999, 64), page_size=16), {}),
]


def _build(op: Attention, fields: dict):
    import dataclasses

    from tracea.emitters import cuda
    from tracea.emitters.cuda.attention_decode import hero_schedule

    sched = dataclasses.replace(hero_schedule(op, None), **fields)
    return cuda.build(op, "cuda-mma-sync.attention", sched, None)


def _build_or_skip(op: Attention, fields: dict, reasons: tuple[str, ...] = ("sm_90",)):
    """``_build``, skipped where this GPU cannot run the schedule (TMA before sm_90; a ring past its shared memory)."""
    from tracea.doctor.errors import BadInputError

    try:
        return _build(op, fields)
    except BadInputError as exc:
        if any(w in str(exc) for w in reasons):
            pytest.skip(str(exc))
        raise


@pytest.mark.parametrize("op,fields", CASES, ids=lambda x: x.signature[:70] if isinstance(x, Attention) else str(x))
def test_decode_matches_the_reference(op, fields):
    _gpu_or_skip()
    kernel = _build(op, fields)
    assert kernel.rendered.metadata["core"] == "attention-decode"
    inputs = op.random_inputs(np.random.default_rng())
    out, lse = assert_matches_reference(kernel, op, inputs)
    again, lse2 = kernel.forward(inputs)
    assert np.array_equal(again.view(np.uint16), out.view(np.uint16)) and np.array_equal(lse2, lse)


# TMA loads (sm_90) over tail tiles past seq_k, masks, rows keeping no key, many slices, 128-key tiles, head dim
# 256, lengths (one of 0: its rows past the length are the cache's own garbage) and pages of 16 and 64
TMA_CASES = [CASES[i] for i in (0, 1, 2, 3, 4, 9, 11, 12, 13, 14, 15, 16, 17)] + [
    (Attention(3, 16, 2, 128, seq_k=3000, kv_heads=4, dtype="bf16", causal=True, seq_lens=(3000, 1, 1777),
               page_size=64, pages=200), {"kw": 2}),
    (Attention(2, 8, 1, 64, seq_k=2000, kv_heads=2, dtype="fp16", seq_lens=(1999, 77), page_size=8), {}),
    # pages longer than a tile (a box of BK rows inside a page), and head dim 192 (three column boxes)
    (Attention(2, 8, 1, 64, seq_k=3000, kv_heads=2, dtype="bf16", seq_lens=(3000, 130), page_size=128), {}),
    (Attention(2, 8, 2, 192, seq_k=1500, kv_heads=4, dtype="bf16", causal=True), {"stages": 2}),
]
TMA_LOADS = [{"bulk": True}, {"bulk": True, "stages": 2, "warps": 8}]


@pytest.mark.parametrize("loads", TMA_LOADS, ids=lambda f: "_".join(f"{k}{v}" for k, v in f.items()))
@pytest.mark.parametrize("op,fields", TMA_CASES, ids=lambda x: x.signature[:70] if isinstance(x, Attention) else str(x))
def test_tma_loads_match_the_reference(op, fields, loads):
    _gpu_or_skip()
    kernel = _build_or_skip(op, {**fields, **loads}, ("sm_90", "exceeds"))  # a ring too large for shared memory
    assert "_tma" in kernel.rendered.name
    inputs = op.random_inputs(np.random.default_rng())
    out, lse = assert_matches_reference(kernel, op, inputs)
    again, lse2 = kernel.forward(inputs)
    assert np.array_equal(again.view(np.uint16), out.view(np.uint16)) and np.array_equal(lse2, lse)


@pytest.mark.parametrize("loads", [{}, {"bulk": True}], ids=["cp.async", "tma"])
def test_nan_past_the_lengths_of_a_contiguous_cache_is_never_read(loads):
    """Contiguous K/V with lengths: rows past an entry's length are the cache's own (NaN here); TMA loads them
    with the tile and zeroes V's."""
    _gpu_or_skip()
    op = Attention(3, 8, 2, 64, seq_k=700, kv_heads=2, dtype="fp16", causal=True, seq_lens=(700, 65, 300))
    kernel = _build_or_skip(op, loads)
    inputs = op.random_inputs(np.random.default_rng())
    for name in ("k", "v"):
        for b, n in enumerate(op.key_lens):
            inputs[name][b, :, n:] = np.nan  # the fp16 arrays are float16
    assert_matches_reference(kernel, op, inputs)


def test_ops_attention_runs_decode_on_torch_tensors():
    _gpu_or_skip()
    torch = pytest.importorskip("torch")
    import tracea

    q = torch.randn(4, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 8, 3000, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(4, 8, 3000, 128, device="cuda", dtype=torch.bfloat16)
    tracea.ops.clear_cache()
    y = tracea.ops.attention(q, k, v)
    route = tracea.ops.explain()
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert route.path == "tracea", route
    kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel
    assert kernel.rendered.metadata["core"] == "attention-decode"
    assert float((y.float() - want.float()).abs().max()) <= 2e-2 * float(want.float().abs().max())
    y2 = tracea.ops.attention(q, k, v)  # the prepared call: the same bits
    assert torch.equal(y, y2)


def test_a_bad_table_or_length_is_refused_before_the_launch():
    """A used table entry outside the pool, or a length past the table's pages: one BadInputError, raised by
    the host object before anything is uploaded or launched; a table entry past an entry's pages (-1) is
    never read."""
    _gpu_or_skip()
    from tracea.doctor.errors import BadInputError

    op = Attention(2, 8, 1, 64, seq_k=256, kv_heads=2, dtype="bf16", seq_lens=(256, 40), page_size=16)
    kernel = _build(op, {})
    inputs = op.random_inputs(np.random.default_rng())
    table = inputs["block_table"].copy()
    table[1, 2] = op.pages
    with pytest.raises(BadInputError, match=r"block_table\[1, 2\]"):
        kernel.forward({**inputs, "block_table": table})
    with pytest.raises(BadInputError, match=r"seq_lens\[1\]"):
        kernel.forward({**inputs, "seq_lens": np.array([256, 257], np.int32)})
    table[1, 2] = -1  # an entry past the sequence's pages is never read
    lens = np.array([256, 32], np.int32)
    want = op.reference({**inputs, "block_table": table, "seq_lens": lens})
    got = kernel({**inputs, "block_table": table, "seq_lens": lens})
    from tracea.kernels.dtypes import to_float64

    assert np.abs(to_float64(got, op.dtype) - want).max() <= 2e-2 * np.abs(want).max()


def _cuda(x: np.ndarray):
    import torch

    t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if x.dtype == np.uint16 else torch.from_numpy(x)
    return t.cuda()


def _host(t) -> np.ndarray:
    import torch

    return t.cpu().view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.cpu().numpy()


def _captured(call):
    """(a CUDA graph of ``call``, the output it replays into): ``call`` warmed up on a side stream first, as
    torch asks before a capture."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = call()
    return graph, y


def test_ops_attention_reads_a_paged_cache_its_lengths_at_each_call_and_in_a_cuda_graph():
    """tracea.ops on a paged cache: the decode kernel, verified; the prepared call reads new lengths (and a
    table refilled in place) at every call; a bad table is refused before the launch; inside a CUDA graph the
    lengths updated between replays are read."""
    _gpu_or_skip()
    torch = pytest.importorskip("torch")
    import tracea
    from tracea.doctor.errors import BadInputError
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    op = Attention(4, 32, 1, 128, seq_k=2048, kv_heads=8, dtype="bf16", seq_lens=(2048, 1, 700, 0), page_size=16)
    x = op.random_inputs(np.random.default_rng())
    t = {n: _cuda(a) for n, a in x.items()}

    def call():
        return tracea.ops.attention(t["q"], t["k"], t["v"], block_table=t["block_table"], seq_lens=t["seq_lens"])

    def check(y):
        now = {n: _host(a) for n, a in t.items()}
        err = relative_error(to_float64(_host(y), op.dtype), op.reference(now))
        assert err <= tolerance(op), err

    tracea.ops.clear_cache()
    check(call())
    assert tracea.ops.explain().path == "tracea"
    kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel
    assert kernel.rendered.metadata["core"] == "attention-decode" and "_p16" in kernel.rendered.name
    t["seq_lens"].copy_(torch.tensor([5, 2048, 100, 17], dtype=torch.int32))
    with pytest.raises(BadInputError, match=r"block_table\[1, 1\]"):  # entry 1 grew from 1 key to 2048: its row is -1 past page 0
        call()
    spare = sorted(set(range(op.pages)) - set(x["block_table"][x["block_table"] >= 0].tolist()))
    t["block_table"][3, :2] = torch.tensor(spare[:2], dtype=torch.int32)
    t["block_table"][1, :] = torch.tensor(spare[2:2 + op.table_cols], dtype=torch.int32)
    check(call())  # the prepared call, new lengths and pages
    graph, y = _captured(call)
    t["seq_lens"].copy_(torch.tensor([2048, 1, 33, 31], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    check(y)


@pytest.mark.parametrize("loads", [{}, {"bulk": True}, {"bulk": True, "warps": 8}],
                         ids=["cp.async", "tma", "tma_k128"])
def test_nan_in_the_pool_outside_the_entries_keys_is_never_read(loads):
    """A serving cache is mostly memory no entry holds: its free pages, and the rows of a last page past an
    entry's length. Filled with NaN there, the result is still the reference's: the cp.async fill zero-fills rows
    past the length and never loads a page no entry uses; TMA loads whole pages (128-key tiles: boxes past the
    length clamped onto the last page) and zeroes V's rows past the length in shared memory."""
    _gpu_or_skip()
    op = Attention(3, 16, 1, 128, seq_k=1000, kv_heads=4, dtype="bf16", seq_lens=(1000, 37, 513), page_size=16,
                   pages=200)
    kernel = _build_or_skip(op, loads)
    inputs = op.random_inputs(np.random.default_rng())
    nan = np.uint16(0x7FC0)
    for name in ("k", "v"):
        pool = inputs[name]
        used = np.zeros(op.pages, bool)
        for b, n in enumerate(op.key_lens):
            pages = inputs["block_table"][b, :-(-n // 16)]
            used[pages] = True
            pool[pages[-1], n - (len(pages) - 1) * 16:] = nan  # the last page's rows past the length
        pool[~used] = nan
    assert_matches_reference(kernel, op, inputs)
