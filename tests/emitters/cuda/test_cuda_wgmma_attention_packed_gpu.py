"""The Hopper attention kernel on packed entries (FlashAttention's varlen layout) on an sm_90 GPU (skipped
elsewhere): O and lse against the entry-by-entry float64 reference on fresh random inputs, into NaN-poisoned
outputs (a row the kernel fails to write shows), over entries of 0 and 1 tokens, entries ending on and off a
tile edge, causal, windows and neither, MHA, GQA and MQA, head dims 32 to 256 (multiples of 64 and not), bf16
and fp16, the hero and other schedules (one consumer, other key tiles, K and V released apart, no
intra-warpgroup overlap); offsets other than those the op was planned with; then ``tracea.ops.attention`` with
``cu_seqlens`` on torch CUDA tensors: the Hopper kernel (not the fallback), new offsets at each call, bad
offsets refused before the launch, and new offsets read by a CUDA graph's replay."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_attention_decode_gpu import _captured, _cuda, _host  # torch tensors both ways; a graph
from test_cuda_wgmma_attention_gpu import _cache, _sm90  # noqa: F401 - _cache: the autouse kernel-cache fixture

from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, Attention, lse_error

pytestmark = pytest.mark.gpu


def packed(lens: tuple[int, ...], heads: int, d: int, cap: int | None = None, **kw) -> Attention:
    cap = cap or max(lens)
    return Attention(len(lens), heads, cap, d, seq_k=cap, seq_lens=lens, packed=True, **kw)


CASES = [
    packed((300, 0, 1, 128, 129), 4, 64, kv_heads=2, dtype="bf16", causal=True),
    packed((1000, 24, 517), 8, 128, kv_heads=2, dtype="bf16", causal=True),
    packed((1000, 24, 517), 8, 128, kv_heads=8, dtype="fp16"),
    packed((200, 77, 333), 4, 80, kv_heads=1, dtype="bf16", causal=True, window=(64, 0)),
    packed((130, 200, 17), 2, 96, dtype="fp16", window=(50, 7)),
    packed((256, 64, 1), 4, 32, kv_heads=4, dtype="bf16"),
    packed((300, 150), 2, 160, dtype="bf16", causal=True),
    packed((333, 100, 64), 2, 256, dtype="fp16", causal=True),
    packed((700, 700), 4, 128, cap=2048, kv_heads=2, dtype="bf16", causal=True),  # capacity past every entry
]


def _check(op: Attention, sched=None, inputs=None, want: Attention | None = None, seed: int = 5):
    from tracea.emitters.cuda.hopper.attention_kernel import build

    k = build(op, sched)
    inputs = inputs or op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), 0x7FC0 if op.dtype.value == "bf16" else 0x7E00, op.dtype.storage)
    lse = np.full(op.lse_shape(), np.nan, np.float32)
    k.forward(inputs, out, lse)
    ref, ref_lse = (want or op).reference_with_lse(inputs)
    err = relative_error(to_float64(out, op.dtype), ref)
    assert err <= tolerance(op), f"{op.signature}: relative error {err:.3g}"
    le = lse_error(lse, ref_lse)
    assert le <= LSE_TOLERANCE, f"{op.signature}: lse error {le:.3g}"
    return k


@pytest.mark.parametrize("op", CASES, ids=lambda op: op.signature[:70])
def test_packed_entries_match_the_reference(op):
    _sm90()
    k = _check(op)
    assert k.rendered.name.endswith("_packed")


SCHEDULES = [
    {"bk": 64, "stages": 2, "consumers": 1, "pingpong": False, "intra": False},
    {"bk": 96, "stages": 3, "consumers": 2, "pingpong": True, "intra": True},
    {"bk": 128, "stages": 2, "consumers": 2, "pingpong": True, "intra": False, "split_kv": True},
    {"bk": 176, "stages": 2, "consumers": 2, "pingpong": False, "intra": False},
]


@pytest.mark.parametrize("fields", SCHEDULES, ids=lambda f: "_".join(f"{k}{int(v)}" for k, v in f.items()))
def test_other_schedules(fields):
    _sm90()
    from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule

    op = packed((400, 1, 190, 0, 64), 4, 128, kv_heads=2, dtype="bf16", causal=True)
    _check(op, AttnWgmmaSchedule(**fields))


def test_the_offsets_given_are_read_not_the_ops():
    _sm90()
    planned = packed((300, 300, 300), 4, 64, cap=600, dtype="bf16", causal=True)
    given = dataclasses.replace(planned, seq_lens=(0, 599, 301))
    _check(planned, inputs=given.random_inputs(np.random.default_rng(9)), want=given)


def test_ops_attention_runs_packed_entries_on_the_hopper_kernel_and_in_a_cuda_graph():
    _sm90()
    torch = pytest.importorskip("torch")
    import tracea
    from tracea.doctor.errors import BadInputError

    op = packed((1500, 33, 700, 0, 815), 16, 128, cap=2048, kv_heads=4, dtype="bf16", causal=True)
    x = op.random_inputs(np.random.default_rng(11))
    t = {n: _cuda(a) for n, a in x.items()}

    def call():
        return tracea.ops.attention(t["q"], t["k"], t["v"], causal=True, cu_seqlens=t["cu_seqlens"], max_seqlen=2048)

    def check(y, lens):
        now = {n: _host(a) for n, a in t.items()}
        want = dataclasses.replace(op, seq_lens=tuple(lens))
        err = relative_error(to_float64(_host(y), op.dtype), want.reference(now))
        assert err <= tolerance(op), err

    tracea.ops.clear_cache()
    check(call(), op.seq_lens)
    assert tracea.ops.explain().path == "tracea"
    kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel
    assert kernel.rendered.name.endswith("_packed")
    lens = (2048, 0, 999, 1, 0)
    t["cu_seqlens"].copy_(torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32))
    check(call(), lens)  # the prepared call, new offsets
    t["cu_seqlens"][2] = 5000
    with pytest.raises(BadInputError, match="cu_seqlens"):
        call()
    lens = (1, 2, 3, 2000, 1042)
    t["cu_seqlens"].copy_(torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32))
    graph, y = _captured(call)
    lens = (600, 600, 1848, 0, 0)
    t["cu_seqlens"].copy_(torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    check(y, lens)
