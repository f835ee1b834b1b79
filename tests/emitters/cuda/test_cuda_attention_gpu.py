"""The mma.sync attention kernel on a GPU: O and lse against the float64 reference on fresh random inputs,
over odd shapes and every mask kind, with a NaN-poisoned output (an element left unwritten shows)."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, Attention, lse_error

pytestmark = pytest.mark.gpu

VID = "cuda-mma-sync.attention"


def _gpu_or_skip():
    pytest.importorskip("cuda.core")
    from tracea.doctor.errors import UnsupportedError
    from tracea.emitters.cuda.runtime import _Device

    try:
        _Device.get()
    except UnsupportedError as exc:
        pytest.skip(str(exc))


def _mask(grid: tuple[int, int], density: float, seed: int) -> np.ndarray:
    keep = np.random.default_rng(seed).random(grid) < density
    keep[0, 0] = True
    return keep


def _cases() -> list[tuple[Attention, object]]:
    bs = (48, 80)  # a block-mask tile that is no multiple of any kernel tile
    s1000 = Attention(1, 2, 1000, 64, dtype="bf16", block_size=bs)
    return [
        (Attention(1, 1, 1, 64, dtype="bf16"), None),
        (Attention(2, 3, 17, 128, dtype="fp16"), None),
        (Attention(1, 2, 1000, 64, dtype="bf16", causal=True), None),
        (Attention(1, 2, 200, 128, seq_k=700, dtype="bf16", causal=True), None),
        (Attention(1, 2, 700, 128, seq_k=200, dtype="fp16", causal=True), None),  # rows keeping nothing
        (Attention(1, 2, 333, 64, seq_k=900, dtype="bf16", window=(100, 37)), None),
        (Attention(1, 2, 1000, 64, dtype="bf16", block_size=bs, block_mask=_mask(s1000.grid(), 0.3, 1)), None),
        (Attention(2, 8, 257, 128, kv_heads=2, dtype="bf16", causal=True), None),
        (Attention(1, 2, 300, 256, dtype="bf16", causal=True), None),
        (Attention(1, 2, 129, 256, seq_k=77, dtype="fp16", window=(20, 5)), None),
        (Attention(1, 4, 513, 128, dtype="fp16"), "q64"),
        (Attention(2, 3, 300, 128, seq_k=500, dtype="bf16", window=(64, 64)), "q128"),
        (Attention(1, 4, 333, 128, seq_k=517, dtype="bf16", causal=True), "w32"),
        (Attention(2, 4, 200, 64, kv_heads=1, dtype="fp16", window=(50, 10)), "w32"),
        (Attention(1, 4, 513, 64, dtype="bf16", causal=True), "s3"),
    ]


def _head_dim_cases() -> list[tuple[Attention, object]]:
    """Head dims that are no multiple of 64 (rows padded by 16 bytes) and 192 (swizzled, Q from shared
    memory): odd lengths, causal both ways, seq_q != seq_k, GQA, a window, a block mask, the other tiles;
    then every multiple of 16 from 32 to 256 on one ragged causal or plain case."""
    bs = (48, 80)
    s500 = Attention(1, 2, 500, 144, dtype="bf16", block_size=bs)
    cases = [
        (Attention(1, 2, 1000, 80, dtype="bf16", causal=True), None),
        (Attention(2, 3, 17, 32, dtype="fp16"), None),
        (Attention(1, 2, 200, 96, seq_k=700, dtype="bf16", causal=True), None),
        (Attention(1, 2, 700, 160, seq_k=200, dtype="fp16", causal=True), None),  # rows keeping nothing
        (Attention(2, 8, 257, 96, kv_heads=2, dtype="bf16", causal=True), None),
        (Attention(1, 2, 333, 48, seq_k=900, dtype="bf16", window=(100, 37)), None),
        (Attention(1, 2, 500, 144, dtype="bf16", block_size=bs, block_mask=_mask(s500.grid(), 0.3, 2)), None),
        (Attention(1, 2, 300, 240, dtype="bf16", causal=True), None),
        (Attention(1, 2, 300, 192, seq_k=517, dtype="fp16"), None),
        (Attention(1, 4, 513, 80, dtype="fp16"), "w32"),
        (Attention(1, 4, 513, 112, dtype="bf16", causal=True), "q64"),
        (Attention(1, 4, 513, 96, dtype="bf16", window=(64, 64)), "q128"),
        (Attention(2, 4, 200, 32, kv_heads=1, dtype="fp16", window=(50, 10)), "w32"),
        (Attention(1, 4, 333, 176, seq_k=517, dtype="bf16", causal=True), "s3"),
    ]
    return cases + [(Attention(1, 2, 200, d, seq_k=333, dtype="bf16", causal=d % 32 == 0), None)
                    for d in range(32, 257, 16)]


def _schedule(op: Attention, tweak: object):
    from tracea.emitters import cuda
    from tracea.emitters.cuda.attention import AttentionMmaSchedule

    hero = cuda.hero_schedule(op, VID, None)
    if tweak == "q64":
        return AttentionMmaSchedule(bq=64, bk=64, stages=3)
    if tweak == "q128":
        return AttentionMmaSchedule(bq=128, bk=64, stages=2)
    if tweak == "w32":
        return AttentionMmaSchedule(bq=128, bk=32 if op.head_dim > 64 else 64, stages=2, warp_rows=32)
    if tweak == "s3":
        return AttentionMmaSchedule(bq=128, bk=64, stages=3, order="natural")
    return hero


def assert_matches_reference(kernel, op: Attention, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """O (into a NaN-poisoned output: an element left unwritten shows) and lse of one call against the float64
    reference; returns them."""
    poison = np.full(op.output_shape(), np.nan if op.dtype.value != "bf16" else 0x7FC0, op.dtype.storage)
    out, lse = kernel.forward(inputs, out=poison)
    ref, ref_lse = op.reference_with_lse(inputs)
    got = to_float64(out, op.dtype)
    assert not np.isnan(got).any(), "elements left unwritten"
    assert relative_error(got, ref) <= tolerance(op), relative_error(got, ref)
    assert lse_error(lse, ref_lse) <= LSE_TOLERANCE, lse_error(lse, ref_lse)
    return out, lse


@pytest.mark.parametrize("op,tweak", _cases(), ids=lambda x: x.signature[:70] if isinstance(x, Attention) else str(x))
def test_attention_matches_the_reference(op, tweak):
    _gpu_or_skip()
    from tracea.emitters import cuda

    kernel = cuda.build(op, VID, _schedule(op, tweak), None)
    assert_matches_reference(kernel, op, op.random_inputs(np.random.default_rng(7)))
    plan_tiles = kernel.tiles_computed
    assert 0 < plan_tiles <= op.batch * op.heads * -(-op.seq_q // 64) * -(-op.seq_k // 32)


@pytest.mark.parametrize("op,tweak", _head_dim_cases(),
                         ids=lambda x: x.signature[:70] if isinstance(x, Attention) else str(x))
def test_every_head_dim_matches_the_reference(op, tweak):
    test_attention_matches_the_reference(op, tweak)


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


def test_cli_bench_gives_a_verified_row(capsys, monkeypatch):
    """`tracea bench attention --backend cuda` (mma.sync registered here if it is not yet): a verified row of
    the variant the planner chooses on this GPU (the wgmma kernel on Hopper) and the SDPA baseline's ratio."""
    _gpu_or_skip()
    import json

    from tracea.__main__ import main
    from tracea.emitters.cuda import backend, variants

    if VID not in {v.id for v in backend.VARIANTS}:
        monkeypatch.setattr(backend, "VARIANTS", backend.VARIANTS + (variants.resolve(VID),))
    code = main(["bench", "attention", "--batch", "1", "--heads", "4", "--kv-heads", "2", "--seq", "300",
                 "--seq-k", "400", "--head-dim", "128", "--dtype", "bf16", "--causal", "--backend", "cuda", "--json",
                 "--repeat", "3", "--warmup", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    row = json.loads(out.splitlines()[0])
    op = Attention(1, 4, 300, 128, seq_k=400, kv_heads=2, dtype="bf16", causal=True)
    from tracea.doctor import probe
    from tracea.doctor.plan import plan
    from tracea.emitters import registry

    chosen = plan(op, probe(), registry.all_variants("cuda"), backend="cuda").chosen  # wgmma on Hopper
    assert row["status"] == "ok" and row["rel_err"] <= tolerance(op) and row["variant"] == chosen, row
