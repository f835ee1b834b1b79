"""The CPU attention kernel (emitters/cpu/attention.py) compiled and run on every family this machine can
run: O against the float64 reference, lse against the reference's, odd sequences, GQA, causal with
seq_q != seq_k, a window, a 25 %-dense block mask with an empty row, 1 and 2 threads, and the K/V blocks
it loaded equal to the IR's ``tile_counts`` (so masked blocks are skipped)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.doctor.snapshot import load_snapshot
from tracea.emitters import cpu
from tracea.emitters.cpu import backend
from tracea.emitters.cpu.attention import AttentionSchedule, attention_space
from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, Attention, lse_error

HOST = probe()
SNAPSHOTS = Path(__file__).parents[2] / "fixtures" / "snapshots"
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")
BLOCK = (32, 64)  # the schedule's bq x bk in the cases below (one binary per head dim, family and threads)

pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled


def _block_mask(rng: np.random.Generator, grid: tuple[int, int]) -> np.ndarray:
    """About a quarter of the tiles kept, the first q block's row empty (its rows keep no key)."""
    bm = np.zeros(grid, dtype=bool)
    cells = rng.choice(np.arange(grid[1], grid[0] * grid[1]), size=grid[0] * grid[1] // 4, replace=False)
    bm.flat[cells] = True
    return bm


def _cases(rng: np.random.Generator) -> list[Attention]:
    return [
        Attention(1, 2, 1, 64),
        Attention(1, 2, 17, 128),
        Attention(1, 2, 1000, 64),
        Attention(1, 4, 50, 64, seq_k=77, kv_heads=2),  # GQA
        Attention(1, 2, 40, 128, seq_k=100, causal=True),  # bottom-right diagonal, seq_q < seq_k
        Attention(1, 2, 100, 64, seq_k=40, causal=True),  # seq_q > seq_k: the first 60 rows keep nothing
        Attention(1, 2, 150, 64, window=(20, 5)),
        Attention(2, 2, 90, 128, seq_k=70, kv_heads=1, causal=True, window=(10, 10)),
        Attention(1, 2, 256, 64, block_size=BLOCK, block_mask=_block_mask(rng, (8, 4))),
        Attention(1, 2, 70, 40, seq_k=50, causal=True),  # head_dim no multiple of 16: AVX-512 pads it
    ]


def variant(family: str, dtype: str = "fp32"):
    v = cpu.resolve(f"{family}.attention")
    if v.unmet(HOST, dtype):
        pytest.skip(f"{v.id} cannot run here: {'; '.join(v.unmet(HOST, dtype))}")
    return v


def _check(op: Attention, kernel, inputs: dict[str, np.ndarray]) -> None:
    out, lse = kernel.forward(inputs)
    ref, ref_lse = op.reference_with_lse(inputs)
    assert relative_error(to_float64(out, op.dtype), ref) <= tolerance(op), op
    assert lse_error(lse, ref_lse) <= LSE_TOLERANCE, op
    empty = np.isneginf(ref_lse)
    assert np.all(to_float64(out, op.dtype)[empty] == 0.0), op  # a row that keeps no key: O = 0, lse = -inf
    assert kernel.tiles_computed == op.tile_counts((kernel.artifact.schedule["bq"],
                                                    kernel.artifact.schedule["bk"]))[1], op


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("threads", [1, 2])
def test_attention_matches_the_reference(family, threads):
    v = variant(family)
    if threads > (HOST.cpu.logical_cores or 1):
        pytest.skip("one core here")
    rng = np.random.default_rng()
    for op in _cases(rng):
        kernel = cpu.build(op, v, AttentionSchedule(*BLOCK, threads=threads), HOST)
        _check(op, kernel, op.random_inputs(rng))


@pytest.mark.parametrize("family", ["cpu-avx512", "cpu-avx2-fma"])
@pytest.mark.parametrize("block", [(16, 16), (48, 32), (64, 128), (128, 64), (256, 32)])
def test_every_register_tile_and_block(family, block):
    """bq picks the S^T tile's row vectors (1 to 4 on AVX-512): each with causal and window edges, a key
    tail no multiple of the tile's 4 keys, GQA, and large logits (2^x far below -126 flushed to 0)."""
    v = variant(family)
    rng = np.random.default_rng()
    for op in (Attention(1, 2, 300, 64, seq_k=333, causal=True, window=(70, 0)),
               Attention(1, 4, 129, 128, seq_k=61, kv_heads=1),
               Attention(1, 2, 100, 64, seq_k=90, causal=True, scale=4.0)):
        kernel = cpu.build(op, v, AttentionSchedule(*block, threads=2 if (HOST.cpu.logical_cores or 1) > 1 else 1),
                           HOST)
        _check(op, kernel, op.random_inputs(rng))


def test_masked_blocks_are_skipped():
    """The causal band, a window and a block mask each leave blocks out: fewer loaded than in all."""
    rng = np.random.default_rng(1)
    v = variant("cpu-portable")
    for op in (Attention(1, 2, 300, 64, causal=True), Attention(1, 2, 300, 64, window=(40, 0)),
               _cases(rng)[-2]):
        kernel = cpu.build(op, v, AttentionSchedule(*BLOCK, threads=1), HOST)
        kernel(op.random_inputs(rng))
        total, computed = op.tile_counts(BLOCK)
        assert kernel.tiles_computed == computed < total


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_16_bit_inputs(dtype):
    family = next((f for f in FAMILIES if not cpu.resolve(f"{f}.attention").unmet(HOST, dtype)), None)
    if family is None:
        pytest.skip(f"no CPU family runs {dtype} here")
    rng = np.random.default_rng()
    for op in (Attention(1, 2, 70, 64, seq_k=90, causal=True, dtype=dtype),
               Attention(1, 4, 33, 128, kv_heads=2, window=(8, 8), dtype=dtype)):
        kernel = cpu.build(op, cpu.resolve(f"{family}.attention"), AttentionSchedule(*BLOCK, threads=1), HOST)
        _check(op, kernel, op.random_inputs(rng))


def test_hero_runs_and_the_space_is_valid():
    v = variant("cpu-portable")
    rng = np.random.default_rng()
    op = Attention(1, 2, 45, 64, seq_k=21)
    hero = cpu.hero_schedule(op, v, HOST)
    assert (hero.bq, hero.bk) == (48, 32)  # clamped to the sequences
    _check(op, cpu.build(op, v, hero, HOST), op.random_inputs(rng))
    space = cpu.search_space(op, v, HOST)
    assert space[0] == hero and len(space) == len(set(space)) > 1
    for s in space:
        s.validate(op, HOST, v)


@pytest.mark.parametrize("snapshot", ["ci_vm.json", "h100_live.json"])
def test_hero_schedules_are_valid_on_recorded_hosts(snapshot):
    host = load_snapshot(SNAPSHOTS / snapshot)
    rng = np.random.default_rng(2)
    for op in (Attention(1, 8, 2048, 64), Attention(4, 32, 4096, 128, causal=True), _cases(rng)[-2]):
        for v in cpu.ALL_VARIANTS:
            if v.op == "attention":
                s = cpu.hero_schedule(op, v, host)
                s.validate(op, host, v)
                assert s.threads == host.cpu.logical_cores
                assert attention_space(op, v, host)[0] == s


def test_schedule_json_and_its_errors():
    s = AttentionSchedule(32, 64, threads=2)
    assert backend.schedule_from_json(s.to_json()) == s == AttentionSchedule.from_json(s.to_json())
    with pytest.raises(BadInputError, match="unknown field 'mr'"):
        AttentionSchedule.from_json({**s.to_json(), "mr": 4})
    op = Attention(1, 1, 64, 64, block_size=(32, 32), block_mask=np.ones((2, 2), bool))
    with pytest.raises(BadInputError, match="block mask tiles by its block_size"):
        s.validate(op, HOST)
    for bad in (dataclasses.replace(s, bq=0), dataclasses.replace(s, bk=True), dataclasses.replace(s, threads=999)):
        with pytest.raises(BadInputError):
            bad.validate(Attention(1, 1, 8, 64), HOST)


def test_emit_writes_the_source_and_its_schedule(tmp_path):
    import json

    op = Attention(1, 2, 40, 64, causal=True)
    s = AttentionSchedule(*BLOCK, threads=1)
    files = cpu.emit(op, "cpu-avx2-fma.attention", s, HOST, tmp_path)
    source = next(p for p in files if p.suffix == ".c").read_text()
    assert "int tracea_attention(" in source and "#define D 64" in source
    assert AttentionSchedule.from_json(json.loads((tmp_path / "schedule.json").read_text())) == s
