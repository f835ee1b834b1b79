"""The persistent Hopper attention kernel compiled by NVRTC at sm_90a with no spills and no stack: chosen
forms (GQA, windows, block masks, one consumer, a second Q buffer) and the hero made persistent for every head
dim and mask kind. The schedule: test_cuda_wgmma_attention_persistent_schedule.py; GPU runs:
test_cuda_wgmma_attention_gpu.py."""

from __future__ import annotations

import dataclasses

import pytest

from tracea.emitters.cuda.hopper import attention as A
from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule, hero_schedule
from tracea.kernels import Attention


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


COMPILES = [
    (Attention(16, 32, 512, 64, dtype="bf16"), dict(stages=4)),
    (Attention(2, 8, 1000, 64, kv_heads=2, dtype="bf16", causal=True), dict(stages=4)),
    (Attention(1, 4, 4096, 128, dtype="bf16", causal=True), dict(stages=3)),
    (Attention(1, 4, 300, 128, dtype="fp16", window=(100, 5)), dict(stages=2, intra=False)),
    (Attention(2, 8, 400, 128, kv_heads=2, dtype="bf16", causal=True), dict(stages=2, consumers=1, pingpong=False)),
    (Attention(16, 32, 512, 256, dtype="bf16"), dict(bk=64, stages=2, intra=False)),
    (Attention(1, 2, 512, 256, seq_k=256, dtype="fp16", block_size=(128, 128), block_mask=("10", "11", "01", "11")),
     dict(bk=64, stages=2, intra=True)),
    (Attention(1, 8, 333, 256, kv_heads=2, dtype="bf16", causal=True), dict(bk=64, stages=2, pingpong=False)),
    (Attention(16, 32, 512, 64, dtype="bf16", causal=True), dict(stages=4, q_buffers=2)),
    (Attention(2, 8, 400, 128, kv_heads=2, dtype="bf16", causal=True), dict(stages=2, q_buffers=2)),
    (Attention(1, 4, 300, 128, dtype="fp16", window=(100, 5)), dict(stages=2, intra=False, q_buffers=2)),
]


@pytest.mark.parametrize("op,fields", COMPILES, ids=lambda x: getattr(x, "signature", str(x))[:50])
def test_persistent_compiles_at_sm90a_without_spills(op, fields):
    pytest.importorskip("cuda.core")
    from tracea.emitters import nvrtc as nv

    sched = AttnWgmmaSchedule(persistent=True, **fields)
    r, _ = A.render(op, sched)
    _, res, log, _, _ = nv.compile_cached(r.source, r.name, r.entry, "sm_90a")
    assert res.spills == 0 and res.stack_frame == 0, log
    assert 0 < res.regs_per_thread <= 65536 // sched.threads
    assert "serialized" not in log
    assert "const int* __restrict__ walk" in r.source and "tr_mbar_init(qempty" in r.source
    assert r.params == A.PERSISTENT_PARAMS and "order" not in r.params
    assert r.smem == sched.smem_bytes(op.head_dim) <= 232448


MASKS = {"causal": dict(causal=True), "window": dict(window=(100, 5)), "gqa": dict(kv_heads=2, causal=True),
         "blockmask": dict(seq_k=640, block_size=(128, 128), block_mask=("10101", "01110", "00000", "11111"))}


@pytest.mark.parametrize("mask", sorted(MASKS))
@pytest.mark.parametrize("d", [64, 128, 256])
def test_persistent_hero_forms_compile_for_every_mask_and_head_dim(d, mask):
    """The hero made persistent, for each head dim and mask kind: 0 spills at sm_90a."""
    pytest.importorskip("cuda.core")
    from tracea.emitters import nvrtc as nv

    op = Attention(2, 8, 500, d, dtype="bf16", **MASKS[mask])
    sched = dataclasses.replace(hero_schedule(op), persistent=True)
    r, _ = A.render(op, sched)
    _, res, log, _, _ = nv.compile_cached(r.source, r.name, r.entry, "sm_90a")
    assert res.spills == 0 and res.stack_frame == 0 and "serialized" not in log, log
