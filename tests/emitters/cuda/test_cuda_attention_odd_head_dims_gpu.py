"""Head dims of an odd number of 8s (40, 56, 72, 88, 104, 136, 200, 248) on both CUDA prefill kernels, on a GPU
(skipped elsewhere): each computes over the next multiple of 16, the extra 8 columns zeros in shared memory
(the mma.sync kernel's fill writes them as zeros, the wgmma kernel's TMA box reads past the tensor map's head dim,
which it fills with zeros), and stores only the op's columns. O and lse against the float64 reference on fresh
random inputs into NaN-poisoned outputs (a column written past the head dim would land in the next row's
first columns and show as a wrong value; one left unwritten shows as NaN): causal, windows and neither, GQA,
bf16 and fp16, odd sequence lengths; the wgmma kernel's packed form; ``tracea.ops`` on torch tensors, which
runs SDPA at these head dims (the kernels ran slower than it there)."""

from __future__ import annotations

import numpy as np
import pytest
from test_cuda_attention_gpu import _gpu_or_skip, assert_matches_reference
from test_cuda_wgmma_attention_gpu import _cache, _sm90  # noqa: F401 - _cache: the autouse kernel-cache fixture

from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import Attention

pytestmark = pytest.mark.gpu

CASES = [
    Attention(1, 4, 333, 40, seq_k=517, kv_heads=2, dtype="bf16", causal=True),
    Attention(2, 2, 200, 56, dtype="fp16"),
    Attention(1, 4, 700, 72, kv_heads=1, dtype="bf16", window=(100, 20)),
    Attention(1, 2, 257, 88, dtype="fp16", causal=True),
    Attention(1, 2, 129, 104, seq_k=300, dtype="bf16"),
    Attention(1, 4, 400, 136, kv_heads=2, dtype="bf16", causal=True),
    Attention(1, 2, 300, 200, dtype="fp16", causal=True),
    Attention(1, 2, 190, 248, seq_k=333, dtype="bf16"),
]


@pytest.mark.parametrize("op", CASES, ids=lambda op: op.signature[:60])
def test_mma_sync_kernel(op):
    _gpu_or_skip()
    from tracea.emitters import cuda

    vid = "cuda-mma-sync.attention"
    kernel = cuda.build(op, vid, cuda.hero_schedule(op, vid, None), None)
    assert f"#define HD {op.head_dim}\n" in kernel.rendered.source
    assert_matches_reference(kernel, op, op.random_inputs(np.random.default_rng(3)))


@pytest.mark.parametrize("op", CASES, ids=lambda op: op.signature[:60])
def test_wgmma_kernel(op):
    _gpu_or_skip()
    _sm90()
    from tracea.emitters.cuda.hopper.attention_kernel import build

    assert_matches_reference(build(op), op, op.random_inputs(np.random.default_rng(4)))


def test_wgmma_packed_entries_at_head_dim_72():
    _gpu_or_skip()
    _sm90()
    from tracea.emitters.cuda.hopper.attention_kernel import build

    op = Attention(4, 4, 300, 72, seq_k=300, kv_heads=2, dtype="bf16", causal=True, seq_lens=(300, 0, 1, 170),
                   packed=True)
    assert_matches_reference(build(op), op, op.random_inputs(np.random.default_rng(5)))


def test_ops_attention_at_head_dim_72_runs_sdpa_and_says_why():
    """The kernels run it, slower than SDPA (docs/benchmarks.md): tracea.ops calls SDPA and says why."""
    _gpu_or_skip()
    torch = pytest.importorskip("torch")
    import tracea

    op = Attention(2, 8, 1000, 72, kv_heads=2, dtype="bf16", causal=True)
    x = op.random_inputs(np.random.default_rng(6))
    t = {n: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda() for n, a in x.items()}
    tracea.ops.clear_cache()
    y = tracea.ops.attention(t["q"], t["k"], t["v"], causal=True)
    route = tracea.ops.explain()
    assert route.path == "fallback" and "odd number of 8s" in route.reason
    got = to_float64(y.cpu().view(torch.int16).numpy().view(np.uint16), op.dtype)
    assert relative_error(got, op.reference(x)) <= tolerance(op)
