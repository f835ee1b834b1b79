"""The CPU attention kernel on serving ops (emitters/cpu/attention.py): per-entry key lengths and paged K/V
(a pool of pages read through a block table), compiled and run on this machine's best family (and the
portable one): O and lse against the per-entry float64 reference on fresh random inputs for page sizes 16,
64 and 24, entries of 0 and 1 keys and lengths ending inside a block, MHA and GQA, causal and window,
decode (1 and 4 queries) and prefill (100), fp32, bf16 and fp16, head dims 32, 80, 96 and 160; the K/V
blocks loaded equal to the IR's ``tile_counts``. Then what proves the gather: a table whose pages are in
another order than the reference's gives a large error, a pool whose pages are moved (its table with them)
the same bits; the lengths come from the input, not the op's field; bad lengths and pages are one
``BadInputError`` before any compute, and the unchecked path (``launch_ptrs``) clamps them into the pool."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.doctor.errors import BadInputError
from tracea.emitters import cpu
from tracea.emitters.cpu.attention import AttentionSchedule
from tracea.emitters.cpu.render import render
from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, Attention, lse_error

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")
BLOCK = (32, 64)  # bq x bk: a 64-key block spans four 16-key pages, parts of 24-key ones, one 64-key page
THREADS = min(2, HOST.cpu.logical_cores or 1)

pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled

# (op, what it adds); together every page size, length edge, head layout, mask, query count, dtype and head dim
CASES = [
    (Attention(4, 8, 1, 32, seq_k=200, kv_heads=2, causal=True, page_size=16, seq_lens=(0, 1, 77, 200)),
     "decode, GQA, P 16, entries of 0, 1, 77 (inside a block) and all keys"),
    (Attention(3, 2, 4, 80, seq_k=150, causal=True, window=(16, 0), page_size=24, seq_lens=(5, 150, 49)),
     "4 queries, MHA, P 24 (no power of two), causal window"),
    (Attention(4, 4, 100, 96, seq_k=180, kv_heads=2, causal=True, seq_lens=(0, 1, 100, 131)),
     "prefill with lengths, contiguous fp32 read in place; an entry shorter than seq_q keeps few rows"),
    (Attention(2, 2, 100, 160, seq_k=300, window=(40, 8), page_size=64, pages=12, seq_lens=(300, 65)),
     "prefill, P 64, a pool larger than the entries need, window, pre-packed gather"),
    (Attention(2, 4, 4, 80, seq_k=90, kv_heads=1, causal=True, page_size=16, seq_lens=(33, 0), dtype="bf16"),
     "bf16, MQA, P 16"),
    (Attention(2, 2, 1, 96, seq_k=100, page_size=24, dtype="fp16"),
     "fp16 decode, paged without lengths (every entry at seq_k)"),
    (Attention(3, 2, 100, 32, seq_k=140, causal=True, seq_lens=(140, 70, 1), dtype="bf16"),
     "bf16 prefill with lengths, converted once (pre-packed) up to each entry's length"),
    (Attention(2, 4, 100, 160, seq_k=130, kv_heads=2, causal=True, page_size=64, seq_lens=(130, 97), dtype="fp16"),
     "fp16 prefill, GQA, P 64, pre-packed gather"),
]


def _family(dtype: str) -> str | None:
    return next((f for f in FAMILIES if not cpu.resolve(f"{f}.attention").unmet(HOST, dtype)), None)


def _build(op: Attention, family: str, block: tuple[int, int] = BLOCK):
    return cpu.build(op, cpu.resolve(f"{family}.attention"), AttentionSchedule(*block, threads=THREADS), HOST)


def _errors(op: Attention, kernel, inputs: dict[str, np.ndarray], ref_inputs=None) -> tuple[float, float]:
    """(relative error of O, absolute error of lse) of the kernel on ``inputs`` against the reference on
    ``ref_inputs`` (default: the same inputs)."""
    out, lse = kernel.forward(inputs)
    ref, ref_lse = op.reference_with_lse(inputs if ref_inputs is None else ref_inputs)
    return relative_error(to_float64(out, op.dtype), ref), lse_error(lse, ref_lse)


def _check(op: Attention, kernel, inputs: dict[str, np.ndarray]) -> None:
    err, lse_err = _errors(op, kernel, inputs)
    assert err <= tolerance(op) and lse_err <= LSE_TOLERANCE, (op, err, lse_err)
    out, lse = kernel.forward(inputs)
    empty = np.isneginf(lse)
    assert np.all(to_float64(out, op.dtype)[empty] == 0.0), op  # a row that keeps no key: O = 0, lse = -inf
    lens = inputs.get("seq_lens", np.full(op.batch, op.seq_k))
    assert np.all(empty[np.asarray(lens) == 0]), op  # an entry of no keys is all such rows
    bq, bk = (kernel.artifact.schedule[k] for k in ("bq", "bk"))
    given = op if op.seq_lens is None else dataclasses.replace(op, seq_lens=tuple(int(n) for n in lens))
    assert kernel.tiles_computed == given.tile_counts((bq, bk))[1], op  # each entry's blocks, no more


@pytest.mark.parametrize("op", [c[0] for c in CASES], ids=[c[1].split(",")[0] + f"-{i}" for i, c in enumerate(CASES)])
def test_serving_ops_match_the_reference(op):
    family = _family(op.dtype.value)
    if family is None:
        pytest.skip(f"no CPU family runs {op.dtype.value} here")
    rng = np.random.default_rng()
    kernel = _build(op, family)
    assert ("_paged_" in kernel.artifact.name) == bool(op.page_size)
    for _ in range(2):  # fresh inputs: another page order each time
        _check(op, kernel, op.random_inputs(rng))


def test_portable_family_and_the_hero_schedule():
    """The C without intrinsics, and the hero's blocks (clamped to seq_k, not to the entries' lengths)."""
    rng = np.random.default_rng()
    for op in (CASES[0][0], CASES[2][0]):
        _check(op, _build(op, "cpu-portable"), op.random_inputs(rng))
    op = CASES[1][0]
    v = cpu.resolve(f"{_family('fp32')}.attention")
    _check(op, cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST), op.random_inputs(rng))


def test_a_wrong_gather_is_caught_and_the_page_order_is_free():
    """The kernel fed a table whose pages an entry reads in another order than the reference's is far off;
    a pool whose pages are moved, with the table following them, gives the same bits."""
    op = Attention(2, 2, 4, 64, seq_k=128, causal=True, window=(20, 0), page_size=16, seq_lens=(128, 100))
    kernel = _build(op, _family("fp32"))
    rng = np.random.default_rng(7)
    inputs = op.random_inputs(rng)
    _check(op, kernel, inputs)
    shuffled = dict(inputs, block_table=inputs["block_table"].copy())
    for b, n in enumerate(inputs["seq_lens"]):  # each entry's pages in reverse: its window reads other keys
        used = -(-int(n) // op.page_size)
        shuffled["block_table"][b, :used] = inputs["block_table"][b, :used][::-1]
    err, lse_err = _errors(op, kernel, shuffled, ref_inputs=inputs)
    assert err > 100 * tolerance(op) and lse_err > 100 * LSE_TOLERANCE, (err, lse_err)
    perm = rng.permutation(op.pages)  # page p moves to perm[p]
    moved = dict(inputs, k=np.empty_like(inputs["k"]), v=np.empty_like(inputs["v"]))
    moved["k"][perm], moved["v"][perm] = inputs["k"], inputs["v"]
    moved["block_table"] = np.where(inputs["block_table"] >= 0, perm[inputs["block_table"]], -1).astype(np.int32)
    out, lse = kernel.forward(inputs)
    out2, lse2 = kernel.forward(moved)
    assert np.array_equal(out, out2) and np.array_equal(lse, lse2)


def test_lengths_come_from_the_input_and_unused_pages_are_never_read():
    """The op's seq_lens are what random inputs draw; the kernel reads the input's. Table entries past an
    entry's pages may hold anything."""
    op = Attention(2, 2, 3, 64, seq_k=96, causal=True, page_size=16, seq_lens=(96, 96))
    kernel = _build(op, _family("fp32"))
    inputs = op.random_inputs(np.random.default_rng(3))
    inputs["seq_lens"] = np.array([0, 20], dtype=np.int32)
    _check(op, kernel, inputs)
    out, lse = kernel.forward(inputs)
    assert np.all(np.isneginf(lse[0])) and np.isfinite(lse[1]).all()
    junk = dict(inputs, block_table=inputs["block_table"].copy())
    junk["block_table"][0, :] = np.iinfo(np.int32).max  # entry 0 reads no page, entry 1 only its first two
    junk["block_table"][1, 2:] = -7
    out2, lse2 = kernel.forward(junk)
    assert np.array_equal(out, out2) and np.array_equal(lse, lse2)


def test_bad_lengths_and_pages_are_refused_before_any_compute():
    op = Attention(2, 2, 1, 64, seq_k=64, page_size=16, seq_lens=(64, 10))
    kernel = _build(op, _family("fp32"))
    good = op.random_inputs(np.random.default_rng(4))
    out = np.full(op.output_shape(), 123.0, dtype=np.float32)
    bad_page = dict(good, block_table=good["block_table"].copy())
    bad_page["block_table"][1, 0] = op.pages
    too_long = dict(good, seq_lens=np.array([65, 10], dtype=np.int32))
    negative = dict(good, seq_lens=np.array([64, -1], dtype=np.int32))
    for bad, match in ((bad_page, r"block_table\[1, 0\]"), (too_long, r"seq_lens\[0\]"), (negative, r"seq_lens\[1\]")):
        with pytest.raises(BadInputError, match=match):
            kernel(bad, out)
        assert np.all(out == 123.0)  # nothing computed
    with pytest.raises(BadInputError, match="'block_table'.*int64.*expected int32"):
        kernel(dict(good, block_table=good["block_table"].astype(np.int64)), out)
    with pytest.raises(BadInputError, match="missing 'seq_lens'"):
        kernel({k: x for k, x in good.items() if k != "seq_lens"}, out)


def test_the_unchecked_path_clamps_lengths_and_pages():
    """``launch_ptrs`` (the API's prepared path, validated above it) on a table past the pool and lengths past
    seq_k: no read outside the buffers, the result of the clamped inputs."""
    op = Attention(2, 2, 2, 32, seq_k=48, page_size=16, seq_lens=(48, 20))
    kernel = _build(op, "cpu-portable")
    inputs = op.random_inputs(np.random.default_rng(5))
    bad = dict(inputs, block_table=np.array([[-5, 10**6, 2], [op.pages, 0, -1]], dtype=np.int32),
               seq_lens=np.array([1000, -3], dtype=np.int32))
    clamped = dict(inputs, block_table=np.array([[0, op.pages - 1, 2], [op.pages - 1, 0, -1]], dtype=np.int32),
                   seq_lens=np.array([48, 0], dtype=np.int32))
    out = np.empty(op.output_shape(), dtype=np.float32)
    kernel.launch_ptrs(tuple(bad[n].ctypes.data for n in kernel.ptr_names[:-1]) + (out.ctypes.data,))
    assert kernel.ptr_names == ("q", "k", "v", "block_table", "seq_lens", "out")
    ref, _ = op.reference_with_lse(clamped)
    assert relative_error(out.astype(np.float64), ref) <= tolerance(op)


def test_the_contiguous_source_has_no_gather():
    """The paged gather is compiled in only where K/V are paged: the contiguous kernel's source says so."""
    plain, paged = Attention(1, 2, 4, 64, seq_k=64, seq_lens=(30,)), Attention(1, 2, 4, 64, seq_k=64, page_size=16)
    s = AttentionSchedule(*BLOCK, threads=1)
    a, b = (render(op, "cpu-avx2-fma", s) for op in (plain, paged))
    assert "#define AT_PAGED 0" in a.source and "#define AT_PAGED 1" in b.source and "#define PACK_K 1" in b.source
    assert "_paged_" in b.name and "_paged_" not in a.name
    assert a.dims[7:] == (0, 0, 0, 0, 0) and b.dims[7:] == (16, 4, 4, 0, 0)  # page_size, table_cols, pages, tokens, threads


def test_nan_in_the_pool_outside_the_entries_keys_is_never_read():
    """Free pages and the rows of a last page past an entry's length filled with NaN (a cache's memory that
    no entry holds): the result is still the reference's, for decode and for prefill (the pre-packed gather)."""
    for op in (Attention(3, 4, 1, 64, seq_k=200, kv_heads=2, page_size=16, pages=40, seq_lens=(200, 37, 113)),
               Attention(2, 2, 100, 64, seq_k=200, causal=True, page_size=24, pages=30, seq_lens=(150, 199))):
        kernel = _build(op, _family("fp32"))
        inputs = op.random_inputs(np.random.default_rng(9))
        for name in ("k", "v"):
            used = np.zeros(op.pages, bool)
            for b, n in enumerate(op.key_lens):
                pages = inputs["block_table"][b, :-(-n // op.page_size)]
                used[pages] = True
                inputs[name][pages[-1], n - (len(pages) - 1) * op.page_size:] = np.nan
            inputs[name][~used] = np.nan
        _check(op, kernel, inputs)
