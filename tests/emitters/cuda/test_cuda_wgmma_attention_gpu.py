"""The Hopper wgmma attention kernel on an sm_90 GPU (skipped elsewhere): odd shapes and every mask kind
against the float64 reference on fresh random inputs, O and lse, into NaN-poisoned outputs (an element
the kernel fails to write shows as NaN); the persistent form on one block per SM and on a few blocks
walking many items each (zero-tile items, tile counts that differ from item to item)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.kernels import Attention, relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, lse_error

pytestmark = pytest.mark.gpu


def _mask(rows: int, cols: int, seed: int) -> tuple[str, ...]:
    rng = np.random.default_rng(seed)
    m = rng.random((rows, cols)) < 0.4
    m[0, :] = False  # a q block that keeps nothing: O = 0, lse = -inf
    return tuple("".join("1" if b else "0" for b in r) for r in m)


CASES = [
    Attention(1, 2, 1, 64, dtype="bf16"),
    Attention(2, 3, 17, 128, dtype="fp16"),
    Attention(1, 4, 1000, 128, dtype="bf16", causal=True),
    Attention(1, 2, 1000, 64, dtype="fp16", causal=True),
    Attention(1, 2, 300, 256, dtype="bf16"),
    Attention(1, 2, 333, 256, dtype="fp16", causal=True),
    Attention(1, 2, 200, 128, seq_k=777, dtype="bf16", causal=True),  # seq_q < seq_k: bottom-right diagonal
    Attention(1, 2, 777, 64, seq_k=200, dtype="bf16", causal=True),  # seq_q > seq_k: early rows keep nothing
    Attention(1, 2, 513, 128, seq_k=129, dtype="fp16"),
    Attention(2, 8, 400, 128, kv_heads=2, dtype="bf16", causal=True),  # GQA 8/2
    Attention(1, 8, 300, 64, kv_heads=2, dtype="fp16"),
    Attention(1, 2, 1500, 128, dtype="bf16", window=(200, 37)),
    Attention(1, 2, 1000, 256, dtype="bf16", window=(64, 0)),
    Attention(1, 2, 700, 128, seq_k=650, dtype="bf16", block_size=(96, 80), block_mask=_mask(8, 9, 1)),
    Attention(1, 2, 500, 64, dtype="fp16", causal=True, block_size=(200, 50), block_mask=_mask(3, 10, 2)),
]


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


def _sm90() -> None:
    from cuda.core import Device

    if Device(0).compute_capability != (9, 0):
        pytest.skip("the Hopper wgmma attention kernel needs an sm_90 GPU")


def _check(op: Attention, sched=None, seed: int = 5, blocks: int | None = None):
    from tracea.emitters.cuda.hopper.attention_kernel import build

    k = build(op, sched, blocks=blocks)
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full(op.output_shape(), 0x7FC0 if op.dtype.value == "bf16" else 0x7E00, op.dtype.storage)
    lse = np.full(op.lse_shape(), np.nan, np.float32)
    k.forward(inputs, out, lse)
    ref, ref_lse = op.reference_with_lse(inputs)
    err = relative_error(to_float64(out, op.dtype), ref)
    assert err <= tolerance(op), f"{op.signature}: relative error {err:.3g}"
    le = lse_error(lse, ref_lse)
    assert le <= LSE_TOLERANCE, f"{op.signature}: lse error {le:.3g}"
    assert k.tiles_computed == k.plan.computed * op.batch * op.heads
    return k


@pytest.mark.parametrize("op", CASES, ids=lambda op: op.signature[:60])
def test_hero_matches_the_reference(op):
    _sm90()
    _check(op)


@pytest.mark.parametrize("flags", [dict(pingpong=False, intra=False), dict(pingpong=True, intra=False),
                                   dict(pingpong=False, intra=True), dict(consumers=1, pingpong=False)])
def test_schedule_variants_match_the_reference(flags):
    from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule

    _sm90()
    for op in (CASES[3], CASES[9], CASES[13]):
        _check(op, AttnWgmmaSchedule(bk=64 if op.head_dim == 256 else 128, stages=2, **flags), seed=9)


@pytest.mark.parametrize("bk,stages", [(64, 1), (64, 2), (128, 1)])
def test_k_and_v_released_apart_match_the_reference(bk, stages):
    """``split_kv``: each stage's K freed after S, V after P V, on their own barriers (a one-stage ring of
    128-key tiles at head dim 256 fits); every case of this file's list with head dim 256 where 128 keys
    fit, all of them with 64: odd lengths, causal, seq_q != seq_k, GQA, a window, a block mask."""
    from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule

    _sm90()
    for op in CASES:
        sched = AttnWgmmaSchedule(bk=bk, stages=stages, intra=False, split_kv=True)
        try:
            sched.validate(op)
        except Exception:  # noqa: BLE001 - a tile that does not fit this head dim
            continue
        _check(op, sched, seed=11)


def test_call_returns_output_only():
    from tracea.emitters.cuda.hopper.attention_kernel import build

    _sm90()
    op = Attention(1, 2, 130, 64, dtype="bf16", causal=True)
    inputs = op.random_inputs(np.random.default_rng(3))
    out = build(op)(inputs)
    assert out.shape == op.output_shape()
    assert relative_error(to_float64(out, op.dtype), op.reference(inputs)) <= tolerance(op)


# ------------------------------------------------------------------------------------------ persistent

PERSISTENT_CASES = [
    Attention(1, 2, 1, 64, dtype="bf16"),
    Attention(2, 3, 17, 128, dtype="fp16"),
    Attention(1, 4, 1000, 128, dtype="bf16", causal=True),
    Attention(16, 32, 512, 64, dtype="bf16"),  # 2048 items: about 16 a block on 132 SMs
    Attention(4, 8, 1000, 64, dtype="fp16", causal=True),  # 256 items of 1..8 tiles
    Attention(1, 2, 777, 64, seq_k=200, dtype="bf16", causal=True),  # early q tiles keep nothing: O = 0, lse = -inf
    Attention(2, 8, 400, 128, kv_heads=2, dtype="bf16", causal=True),  # GQA 8/2
    Attention(1, 8, 300, 64, kv_heads=2, dtype="fp16"),
    Attention(1, 2, 1500, 128, dtype="bf16", window=(200, 37)),
    Attention(1, 2, 700, 128, seq_k=650, dtype="bf16", block_size=(96, 80), block_mask=_mask(8, 9, 1)),
    Attention(1, 2, 500, 64, dtype="fp16", causal=True, block_size=(200, 50), block_mask=_mask(3, 10, 2)),
    Attention(1, 2, 333, 256, dtype="fp16", causal=True),
    Attention(2, 4, 512, 256, kv_heads=2, dtype="bf16", window=(64, 0)),
]


def _persistent(op: Attention, **fields):
    from tracea.emitters.cuda.hopper.attention_schedule import hero_schedule

    return dataclasses.replace(hero_schedule(op), persistent=True, **fields)


@pytest.mark.parametrize("blocks", [None, 3])
@pytest.mark.parametrize("op", PERSISTENT_CASES, ids=lambda op: op.signature[:60])
def test_persistent_matches_the_reference(op, blocks):
    from cuda.core import Device

    from tracea.emitters.cuda.hopper.attention import work_items

    _sm90()
    sched = _persistent(op)
    k = _check(op, sched, seed=11, blocks=blocks)
    sms = Device(0).properties.multiprocessor_count
    assert k.grid == min(work_items(op, sched), blocks or sms * sched.ctas)


@pytest.mark.parametrize("fields", [dict(intra=False), dict(pingpong=False), dict(pingpong=False, intra=False),
                                    dict(consumers=1, pingpong=False), dict(stages=2),
                                    dict(stages=2, q_buffers=2), dict(stages=2, intra=False, q_buffers=2)])
def test_persistent_schedule_variants_match_the_reference(fields):
    _sm90()
    for op in (PERSISTENT_CASES[4], PERSISTENT_CASES[6], PERSISTENT_CASES[9], PERSISTENT_CASES[5]):
        sched = _persistent(op, **fields)
        for blocks in (None, 5):
            _check(op, sched, seed=13, blocks=blocks)


TWO_BLOCK_CASES = [Attention(1, 4, 1200, 64, dtype="bf16", window=(256, 0)),  # the narrow window, short
                   Attention(3, 8, 513, 64, kv_heads=2, dtype="fp16", causal=True)]


@pytest.mark.parametrize("fields", [
    dict(bk=64, stages=2, pingpong=False, intra=False, persistent=False),
    dict(bk=64, stages=4, pingpong=True, intra=False, persistent=False),
    dict(bk=64, stages=3, pingpong=False, intra=False, persistent=True),
    dict(bk=64, stages=4, pingpong=False, intra=False, persistent=True, q_buffers=2),
    dict(bk=80, stages=3, pingpong=False, intra=False, persistent=True),
    dict(bk=64, stages=2, consumers=1, pingpong=False, intra=True, persistent=False),
    dict(bk=64, stages=2, consumers=1, pingpong=False, intra=True, persistent=True)],
    ids=["plain", "pp", "pe", "pe_q2", "k80_pe", "c1_ia", "c1_ia_pe"])
def test_two_blocks_an_sm_match_the_reference(fields):
    """``ctas=2`` (half the registers and at most half the shared memory a block; the persistent grid 2 x SMs)
    on every case of this file that such a form fits (head dims up to 128), the persistent forms also over 5
    blocks: odd lengths, causal both ways, seq_q != seq_k, GQA, windows, block masks, rows keeping nothing."""
    from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule

    _sm90()
    ran = 0
    for op in CASES + PERSISTENT_CASES + TWO_BLOCK_CASES:
        sched = AttnWgmmaSchedule(ctas=2, **fields)
        try:
            sched.validate(op)
        except Exception:  # noqa: BLE001 - registers or shared memory over half an SM's at this head dim
            continue
        for blocks in (None, 5) if sched.persistent else (None,):
            _check(op, sched, seed=19, blocks=blocks)
        ran += 1
    assert ran >= 6


# ------------------------------------------------------------------------------------------ head dims

# Head dims that are no multiple of 64 (64B-swizzled chunks of 32 at 32, 96, 160, 224; 32B ones of 16 at 48,
# 80, 112, 144, 176, 208, 240) and 192: odd lengths, causal both ways, seq_q != seq_k, GQA, a window, a block
# mask; then every multiple of 16 from 32 to 256 on one ragged case, causal or not.
HEAD_DIM_CASES = [
    Attention(1, 2, 1000, 80, dtype="bf16", causal=True),
    Attention(2, 3, 17, 32, dtype="fp16"),
    Attention(1, 2, 200, 96, seq_k=777, dtype="bf16", causal=True),
    Attention(1, 2, 777, 160, seq_k=200, dtype="bf16", causal=True),  # early rows keep nothing
    Attention(2, 8, 400, 96, kv_heads=2, dtype="bf16", causal=True),  # GQA 8/2
    Attention(1, 8, 300, 80, kv_heads=2, dtype="fp16"),
    Attention(1, 2, 1500, 48, dtype="bf16", window=(200, 37)),
    Attention(1, 2, 700, 160, seq_k=650, dtype="bf16", block_size=(96, 80), block_mask=_mask(8, 9, 1)),
    Attention(1, 2, 513, 192, seq_k=129, dtype="fp16"),
    Attention(1, 2, 333, 240, dtype="fp16", causal=True),
] + [Attention(1, 2, 300, d, seq_k=333, dtype="bf16", causal=d % 32 == 0) for d in range(32, 257, 16)]


@pytest.mark.parametrize("op", HEAD_DIM_CASES, ids=lambda op: op.signature[:60])
def test_every_head_dim_matches_the_reference(op):
    _sm90()
    _check(op)


@pytest.mark.parametrize("flags", [dict(pingpong=False, intra=False), dict(consumers=1, pingpong=False),
                                   dict(persistent=True), dict(persistent=True, q_buffers=2),
                                   dict(intra=False, split_kv=True)],
                         ids=["plain", "c1", "pe", "pe_q2", "kv"])
def test_every_head_dim_schedule_variants_match_the_reference(flags):
    """The other loops and the persistent walk (one block per SM and 3 blocks) at head dims 32, 80, 96, 160."""
    from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule

    _sm90()
    for op in (HEAD_DIM_CASES[1], HEAD_DIM_CASES[0], HEAD_DIM_CASES[4], HEAD_DIM_CASES[7]):
        sched = AttnWgmmaSchedule(bk=64, stages=2, **flags)
        for blocks in (None, 3) if sched.persistent else (None,):
            _check(op, sched, seed=17, blocks=blocks)


# ------------------------------------------------------------------------------------------ three consumers

C3_CASES = [op for op in CASES + PERSISTENT_CASES if op.head_dim == 64]


@pytest.mark.parametrize("flags", [dict(), dict(intra=False), dict(pingpong=False),
                                   dict(persistent=True), dict(persistent=True, q_buffers=2)],
                         ids=["pp_ia", "pp", "ia", "pp_ia_pe", "pp_ia_pe_q2"])
def test_three_consumers_match_the_reference(flags):
    """192-row query tiles over three consumers (the ping-pong turns go round all three) at head dim 64, on
    every head-dim-64 case above: odd lengths, causal both ways, GQA, block masks whose blocks are not tiles."""
    from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule

    _sm90()
    for op in C3_CASES:
        _check(op, AttnWgmmaSchedule(bk=128, stages=2, consumers=3, **flags), seed=13)
