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
]


def _build(op: Attention, fields: dict):
    import dataclasses

    from tracea.emitters import cuda
    from tracea.emitters.cuda.attention_decode import hero_schedule

    sched = dataclasses.replace(hero_schedule(op, None), **fields)
    return cuda.build(op, "cuda-mma-sync.attention", sched, None)


@pytest.mark.parametrize("op,fields", CASES, ids=lambda x: x.signature[:70] if isinstance(x, Attention) else str(x))
def test_decode_matches_the_reference(op, fields):
    _gpu_or_skip()
    kernel = _build(op, fields)
    assert kernel.rendered.metadata["core"] == "attention-decode"
    inputs = op.random_inputs(np.random.default_rng())
    out, lse = assert_matches_reference(kernel, op, inputs)
    again, lse2 = kernel.forward(inputs)
    assert np.array_equal(again.view(np.uint16), out.view(np.uint16)) and np.array_equal(lse2, lse)


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
