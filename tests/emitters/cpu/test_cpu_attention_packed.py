"""The CPU attention kernel on packed entries (emitters/cpu/attention.py, ``AT_PACKED``: FlashAttention's varlen
prefill, token-major q, k, v and O, lse (heads, tokens), int32 offsets ``cu_seqlens``), compiled and run on this
machine's best family (and the portable one): O and lse against the entry-by-entry float64 reference on fresh
random inputs, causal and not, windows, MHA, GQA and MQA, entries of 0 and 1 tokens, lengths ending inside a
block and at the full capacity, capacities larger than every entry, fp32, bf16 and fp16, head dims 32, 64, 80
and 128, the pre-packed K/V and the per-task gather; the K/V blocks loaded equal to the IR's ``tile_counts``
(no task for a q block past an entry's length). Then what proves the offsets: offsets shifted by one give a
large error, NaN in one entry's tokens touches only that entry's rows, bad offsets are one ``BadInputError``
before any compute, and the unchecked path (``launch_ptrs``) clamps them: no read or write outside the
arrays, rows no entry holds left as they were."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_cpu_attention_serving import BLOCK, HOST, _build, _family  # the same machine, families and build

from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.emitters.cpu.attention import AttentionSchedule
from tracea.emitters.cpu.render import render
from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, Attention, lse_error

pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled


def packed(batch: int, heads: int, cap: int, d: int, lens: tuple[int, ...], **kw) -> Attention:
    return Attention(batch, heads, cap, d, seq_k=cap, seq_lens=lens, packed=True, **kw)


# (op, what it adds); together every length edge, head layout, mask, dtype and head dim, and both K/V paths
CASES = [
    (packed(4, 4, 128, 64, (0, 1, 77, 128), kv_heads=2, causal=True),
     "causal, GQA, entries of 0, 1, 77 (inside a block) and the full capacity, pre-packed K/V"),
    (packed(3, 2, 160, 32, (50, 3, 100)),
     "not causal, MHA, a capacity above every entry"),
    (packed(4, 4, 90, 80, (1, 90, 0, 45), kv_heads=1, causal=True, window=(16, 0), dtype="bf16"),
     "bf16, MQA, causal window, an entry at the capacity"),
    (packed(2, 2, 100, 128, (33, 70), window=(10, 6), dtype="fp16"),
     "fp16, a two-sided window, d128"),
    (packed(3, 2, 32, 64, (20, 32, 7), causal=True),
     "one q block an entry, MHA: K/V gathered per task (no pre-pack)"),
    (packed(3, 4, 4096, 32, (5, 0, 70), kv_heads=2, dtype="bf16"),
     "a capacity far past every entry (tasks and blocks only up to each entry's length)"),
]


def _lens(inputs: dict[str, np.ndarray]) -> np.ndarray:
    return np.diff(inputs["cu_seqlens"].astype(np.int64))


def _check(op: Attention, kernel, inputs: dict[str, np.ndarray]) -> None:
    out, lse = kernel.forward(inputs)
    assert out.shape == op.output_shape() and lse.shape == op.lse_shape() == (op.heads, out.shape[0])
    ref, ref_lse = op.reference_with_lse(inputs)
    err, lse_err = relative_error(to_float64(out, op.dtype), ref), lse_error(lse, ref_lse)
    assert err <= tolerance(op) and lse_err <= LSE_TOLERANCE, (op, err, lse_err)
    assert np.isfinite(lse).all()  # every token keeps itself
    bq, bk = (kernel.artifact.schedule[k] for k in ("bq", "bk"))
    given = dataclasses.replace(op, seq_lens=tuple(int(n) for n in _lens(inputs)))
    assert kernel.tiles_computed == given.tile_counts((bq, bk))[1], op  # each entry's own blocks, no more


@pytest.mark.parametrize("op", [c[0] for c in CASES], ids=[c[1].split(",")[0] + f"-{i}" for i, c in enumerate(CASES)])
def test_packed_ops_match_the_reference(op):
    family = _family(op.dtype.value)
    if family is None:
        pytest.skip(f"no CPU family runs {op.dtype.value} here")
    rng = np.random.default_rng()
    kernel = _build(op, family)
    assert "_packed_" in kernel.artifact.name
    for _ in range(2):
        _check(op, kernel, op.random_inputs(rng))


def test_the_offsets_come_from_the_input():
    """The op's seq_lens are what random inputs draw; the kernel reads the input's offsets (any lengths that
    sum to the tokens, each within the capacity)."""
    op = packed(3, 2, 64, 32, (30, 30, 30), causal=True)
    kernel = _build(op, _family("fp32"))
    inputs = op.random_inputs(np.random.default_rng(1))
    for cu in ((0, 0, 64, 90), (0, 26, 26, 90), (0, 1, 27, 90)):
        _check(op, kernel, dict(inputs, cu_seqlens=np.array(cu, dtype=np.int32)))


def test_portable_family_and_the_hero_schedule():
    """The C without intrinsics, and the hero's blocks (clamped to the capacity)."""
    rng = np.random.default_rng()
    op = CASES[0][0]
    _check(op, _build(op, "cpu-portable"), op.random_inputs(rng))
    op = CASES[1][0]
    v = cpu.resolve(f"{_family('fp32')}.attention")
    _check(op, cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST), op.random_inputs(rng))


def test_offsets_shifted_by_one_are_caught():
    """A kernel that read each entry one token off (the next entry's first token, or its own last missing)
    would be far from the reference of the true offsets: the offsets are what the kernel addresses by."""
    op = packed(3, 2, 64, 64, (40, 25, 50), causal=True)
    kernel = _build(op, _family("fp32"))
    inputs = op.random_inputs(np.random.default_rng(2))
    _check(op, kernel, inputs)
    ref, ref_lse = op.reference_with_lse(inputs)
    for shift in (1, -1):
        cu = inputs["cu_seqlens"].copy()
        cu[1:-1] += shift
        out, lse = kernel.forward(dict(inputs, cu_seqlens=cu))
        err, lse_err = relative_error(out.astype(np.float64), ref), lse_error(lse, ref_lse)
        assert err > 100 * tolerance(op) and lse_err > 100 * LSE_TOLERANCE, (shift, err, lse_err)


def test_nan_in_one_entry_touches_only_its_rows():
    """NaN in entry 1's tokens of q, k and v: its rows' O and lse are NaN, every other entry's the same bits as
    without them (no block of another entry reaches past its own tokens), pre-packed or gathered per task."""
    for op in (packed(3, 4, 96, 64, (70, 45, 96), kv_heads=2, causal=True),
               packed(3, 2, 32, 64, (20, 32, 7), window=(8, 8))):
        kernel = _build(op, _family("fp32"))
        inputs = op.random_inputs(np.random.default_rng(3))
        out, lse = kernel.forward(inputs)
        cu = inputs["cu_seqlens"]
        rows = np.zeros(out.shape[0], bool)
        rows[cu[1]:cu[2]] = True
        nan = {name: inputs[name].copy() for name in ("q", "k", "v")}
        for x in nan.values():
            x[rows] = np.nan
        out2, lse2 = kernel.forward({**inputs, **nan})
        assert np.isnan(out2[rows]).all() and np.isnan(lse2[:, rows]).all()
        assert np.array_equal(out2[~rows], out[~rows]) and np.array_equal(lse2[:, ~rows], lse[:, ~rows])


def test_bad_offsets_are_refused_before_any_compute():
    op = packed(3, 2, 40, 32, (20, 30, 10))
    kernel = _build(op, _family("fp32"))
    good = op.random_inputs(np.random.default_rng(4))
    out = np.full(op.output_shape(), 123.0, dtype=np.float32)
    cases = (((0, 30, 20, 60), r"cu_seqlens\[2\] = 20: below cu_seqlens\[1\]"),
             ((0, 20, 50, 59), "run from 0 to 59, expected 0 to 60"),
             ((1, 20, 50, 60), "run from 1 to 60"),
             ((0, 5, 50, 60), r"entry 1 holds 45 tokens, more than seq_k=40"))
    for cu, match in cases:
        with pytest.raises(BadInputError, match=match):
            kernel(dict(good, cu_seqlens=np.array(cu, dtype=np.int32)), out)
        assert np.all(out == 123.0)  # nothing computed
    with pytest.raises(BadInputError, match="'cu_seqlens'.*int64.*expected int32"):
        kernel(dict(good, cu_seqlens=good["cu_seqlens"].astype(np.int64)), out)
    with pytest.raises(BadInputError, match="cu_seqlens"):
        kernel(dict(good, cu_seqlens=good["cu_seqlens"][:-1].copy()), out)
    with pytest.raises(BadInputError, match="missing 'cu_seqlens'"):
        kernel({k: x for k, x in good.items() if k != "cu_seqlens"}, out)
    assert np.all(out == 123.0)


def test_the_unchecked_path_clamps_the_offsets():
    """``launch_ptrs`` (the API's prepared path, validated above it) on offsets out of range, decreasing and
    past seq_k: q, k and v sit between NaN rows and O between sentinel rows, so a read outside the arrays would
    show as NaN and a write as a changed sentinel. Rows no clamped entry holds keep what was there; rows
    the clamped offsets give an entry are that entry's."""
    op = packed(3, 2, 40, 32, (20, 30, 10), causal=True)
    kernel = _build(op, "cpu-portable")
    assert kernel.ptr_names == ("q", "k", "v", "cu_seqlens", "out")
    inputs = op.random_inputs(np.random.default_rng(5))
    total, guard = op.output_shape()[0], 8
    padded = {}
    for name in ("q", "k", "v"):
        x = inputs[name]
        padded[name] = np.full((total + 2 * guard, *x.shape[1:]), np.nan, dtype=x.dtype)
        padded[name][guard:guard + total] = x
    # (bad offsets, the valid offsets whose entries they clamp to, the rows the clamped entries hold)
    cases = (((-5, 20, 10**6, 2**31 - 1), (0, 20, 60, 60), (0, 60)),
             ((0, 55, 60, 60), (0, 40, 55, 60), (0, 40, 55, 60)),  # entry 0 past seq_k: its first 40 tokens
             # decreasing: entry 1 empty, entry 2 tokens [0, 10) again (causal: entry 0's first rows, the same values)
             ((0, 30, -9, 10), (0, 30, 30, 60), (0, 30)))
    for bad, valid, held in cases:
        out = np.full((total + 2 * guard, op.heads, op.head_dim), 7.0, dtype=np.float32)
        cu = np.array(bad, dtype=np.int32)
        body = out[guard:guard + total]
        ptrs = [padded[n][guard:].ctypes.data for n in ("q", "k", "v")] + [cu.ctypes.data, body.ctypes.data]
        kernel.launch_ptrs(tuple(ptrs))
        assert np.all(out[:guard] == 7.0) and np.all(out[guard + total:] == 7.0)  # nothing written outside
        mask = np.zeros(total, bool)
        for a, b in zip(held[::2], held[1::2], strict=True):
            mask[a:b] = True
        assert np.all(body[~mask] == 7.0)
        ref, _ = op.reference_with_lse(dict(inputs, cu_seqlens=np.array(valid, dtype=np.int32)))
        assert relative_error(body[mask].astype(np.float64), ref[mask]) <= tolerance(op), bad


def test_only_the_packed_source_reads_offsets():
    """The packed build is compiled in only for packed ops: the other forms' source says AT_PACKED 0 and their
    dims carry no tokens."""
    plain, pk = Attention(2, 2, 64, 64, seq_lens=(30, 64)), packed(2, 2, 64, 64, (30, 64))
    s = AttentionSchedule(*BLOCK, threads=1)
    a, b = (render(op, "cpu-avx2-fma", s) for op in (plain, pk))
    assert "#define AT_PACKED 0" in a.source and "#define AT_PACKED 1" in b.source and "#define PACK_K 1" in b.source
    assert "_packed_" in b.name and "_packed_" not in a.name
    assert a.dims[10:] == (0, 0) and b.dims[10:] == (94, 0)  # tokens, threads
    assert a.buffers[-1] == b.buffers[-1] == "cu_seqlens"
