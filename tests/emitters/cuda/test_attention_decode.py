"""The decode attention core without a GPU: the NumPy model of the kernel's walk (rows packed per kv head,
key tiles cut into slices, a tile's keys dealt to warps, warps then slices merged) against the float64
reference; the split plan; where the planner prefers it; its checks; and its kernels compiled by NVRTC for
sm_90a and sm_80 without spills."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.kernels.ops.attention import Attention, lse_error

D = pytest.importorskip("tracea.emitters.cuda.attention_decode")
Sched = D.AttentionDecodeSchedule

MODEL_CASES = [
    (Attention(2, 8, 1, 64, seq_k=1000, kv_heads=2, dtype="bf16"), Sched(), 3),
    (Attention(1, 4, 5, 32, seq_k=300, kv_heads=1, dtype="fp16", causal=True), Sched(warps=2, kw=2), 2),
    (Attention(1, 2, 3, 80, seq_k=777, kv_heads=2, dtype="bf16", window=(100, 0)), Sched(warps=8), 4),
    (Attention(1, 8, 16, 96, seq_k=10, kv_heads=1, dtype="bf16", causal=True), Sched(), 1),  # rows keeping nothing
    (Attention(3, 6, 7, 160, seq_k=2049, kv_heads=3, dtype="fp16", window=(300, 5)), Sched(stages=2), 7),
    (Attention(1, 32, 2, 128, seq_k=513, kv_heads=4, dtype="bf16"), Sched(), 5),  # 16 rows: one full tile
    (Attention(1, 40, 1, 64, seq_k=4096, kv_heads=2, dtype="bf16"), Sched(warps=2), 16),  # 20 rows: two tiles
    (Attention(1, 1, 1, 64, seq_k=1, dtype="bf16"), Sched(), 1),
    # serving: per-entry lengths (one of no keys, one shorter than a tile), pages of 16 and 64 keys
    (Attention(4, 8, 1, 64, seq_k=300, kv_heads=2, dtype="bf16", seq_lens=(300, 5, 0, 129), page_size=16), Sched(), 3),
    (Attention(3, 4, 2, 128, seq_k=1000, kv_heads=4, dtype="fp16", seq_lens=(1000, 64, 513)), Sched(warps=8), 4),
    (Attention(2, 16, 4, 96, seq_k=777, kv_heads=2, dtype="bf16", causal=True, page_size=64), Sched(), 2),
    (Attention(3, 2, 3, 64, seq_k=400, kv_heads=1, dtype="bf16", window=(40, 0), seq_lens=(400, 3, 90),
               page_size=32, pages=40), Sched(warps=2, kw=2), 5),
]


@pytest.mark.parametrize("op,s,n", MODEL_CASES, ids=lambda x: x.signature[:60] if isinstance(x, Attention) else str(x))
def test_the_walk_and_its_merges_give_the_reference(op, s, n):
    inputs = op.random_inputs(np.random.default_rng(3))
    out, lse = D.model(op, s, n, inputs)
    ref, ref_lse = op.reference_with_lse(inputs)
    assert np.abs(out - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())
    assert lse_error(lse, ref_lse) <= 1e-12


def test_a_wrong_slice_rule_is_caught_by_the_model():
    """The check can fail: a walk that drops the last key tile differs from the reference."""
    op = Attention(1, 4, 1, 64, seq_k=1000, kv_heads=1, dtype="bf16")
    inputs = op.random_inputs(np.random.default_rng(5))
    real = D.key_tiles
    try:
        D.key_tiles = lambda op, bk, klen=None: (real(op, bk, klen)[0], real(op, bk, klen)[1] - 1)
        out, _ = D.model(op, Sched(), 3, inputs)
    finally:
        D.key_tiles = real
    assert np.abs(out - op.reference(inputs)).max() > 1e-3


@pytest.mark.parametrize("lens", [(3000, 64, 0, 1500, 2999, 7), (3000,) * 6, (2900, 3000, 2950, 3000, 2990, 2980)])
def test_the_run_time_slice_rule_gives_the_reference(lens):
    """Lengths that come with the call: each entry's slices from every entry's length (the kernel's ADAPT
    rule), uneven lengths each into the launch's slices of RAGGED_SLICE_KEYS keys at least, about even ones at the
    capacity's plan; the walk still gives the reference."""
    op = Attention(6, 8, 1, 64, seq_k=3000, kv_heads=2, dtype="bf16", seq_lens=lens, page_size=16)
    s = D.hero_schedule(op, None)
    n, adapt = D.split_rule(op, s, 8)  # a small GPU: slices matter at these sizes
    assert adapt is not None and n >= adapt[0]
    got = [D.entry_slices(op, s.bk, np.array(lens), x, n, adapt) for x in lens]
    assert all(1 <= g <= n for g in got)
    if len(set(lens)) == 1 or min(lens) > 0.9 * max(lens):
        assert all(g == min(adapt[0], max(1, D.key_tiles(op, s.bk, x)[1] // D.MIN_TILES))
                   for g, x in zip(got, lens, strict=True))
    else:
        # uneven: each entry the launch's slices, as many as keep adapt[2] tiles (RAGGED_SLICE_KEYS keys) each
        assert adapt[2] == max(D.MIN_TILES, D.RAGGED_SLICE_KEYS // s.bk)
        assert got == [min(n, max(1, (D.key_tiles(op, s.bk, x)[1] - D.key_tiles(op, s.bk, x)[0]) // adapt[2]))
                       for x in lens]
        assert got[0] > 1 and got[1] == 1  # the longest entry is cut, a 64-key one is not
    inputs = op.random_inputs(np.random.default_rng(8))
    out, lse = D.model(op, s, n, inputs, adapt)
    ref, ref_lse = op.reference_with_lse(inputs)
    assert np.abs(out - ref).max() <= 1e-12 and lse_error(lse, ref_lse) <= 1e-12
    r, _ = D.render(op, s, _arch("sm_90a"))
    slice_tiles = max(D.MIN_TILES, D.RAGGED_SLICE_KEYS // s.bk)
    assert r.metadata["key_slices"]["at_run_time"]["slice_tiles"] == slice_tiles and "#define ADAPT 1" in r.source
    assert f"#define SLICE_TILES {slice_tiles}" in r.source
    fixed, _ = D.render(op, dataclasses.replace(s, split=3), _arch("sm_90a"))
    assert "#define ADAPT 0" in fixed.source and fixed.metadata["key_slices"]["splits"] == 3


def test_the_model_finds_rows_through_the_pages():
    """The check can fail: a walk that reads the pool in order (as if the pages were contiguous) differs."""
    op = Attention(2, 4, 1, 64, seq_k=256, kv_heads=1, dtype="bf16", page_size=16)
    inputs = op.random_inputs(np.random.default_rng(6))
    assert not np.array_equal(inputs["block_table"].ravel(), np.arange(op.pages))  # shuffled, by construction
    ordered = {**inputs, "block_table": np.arange(op.pages, dtype=np.int32).reshape(2, -1)}
    out, _ = D.model(op, Sched(), 2, ordered)
    assert np.abs(out - op.reference(inputs)).max() > 1e-3
    out, _ = D.model(op, Sched(), 2, inputs)
    assert np.abs(out - op.reference(inputs)).max() <= 1e-12


@pytest.mark.parametrize("op", [m[0] for m in MODEL_CASES] + [
    Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16"),
    Attention(1, 32, 1, 128, seq_k=131072, kv_heads=8, dtype="bf16"),
    Attention(64, 32, 1, 128, seq_k=512, kv_heads=32, dtype="bf16"),
    Attention(1, 32, 1, 64, seq_k=8192, kv_heads=8, dtype="bf16", window=(256, 0)),
], ids=lambda op: op.signature[:60])
def test_the_split_covers_the_kept_tiles_once(op):
    for s in (Sched(), Sched(warps=8, kw=1, stages=2), Sched(split=5)):
        n = D.splits(op, s, 132)
        t0, t1 = D.key_tiles(op, s.bk)
        assert 1 <= n <= max(1, t1 - t0) and n <= D.MAX_SPLITS
        per = -(-(t1 - t0) // n) if t1 > t0 else 0
        seen = [t for sp in range(n) for t in range(min(t0 + sp * per, t1), min(min(t0 + sp * per, t1) + per, t1))]
        assert seen == list(range(t0, t1))
        keep = op.keep_mask(0, op.seq_q)
        cols = np.nonzero(keep.any(axis=0))[0]
        if cols.size:  # every kept key inside the walked tiles, none far outside
            assert t0 * s.bk <= cols.min() and cols.max() < t1 * s.bk


def test_the_automatic_split_fills_the_gpu_and_long_keys_get_more_slices():
    s = Sched()
    short = Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16")
    long = Attention(1, 32, 1, 128, seq_k=131072, kv_heads=8, dtype="bf16")
    big_batch = Attention(64, 32, 1, 128, seq_k=4096, kv_heads=32, dtype="bf16")
    for op in (short, long):  # one block a SM, within a few SMs
        blocks = D.splits(op, s, 132) * op.batch * op.kv_heads
        assert 0.9 * 132 <= blocks <= 132 or D.splits(op, s, 132) == D.MAX_SPLITS
    assert D.splits(long, s, 132) > D.splits(short, s, 132)
    assert D.splits(big_batch, s, 132) == 1  # 2048 row tiles already fill it


def test_the_planner_prefers_it_for_short_queries_only():
    from tracea.emitters.cuda import cores, variants

    decode = [Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16"),
              Attention(4, 32, 16, 128, seq_k=32768, kv_heads=8, dtype="bf16", causal=True),
              Attention(1, 8, 1, 96, seq_k=100, dtype="fp16")]
    prefill = [Attention(1, 8, 1024, 128, dtype="bf16"), Attention(8, 64, 16, 128, seq_k=4096, kv_heads=8, dtype="bf16"),
               Attention(1, 8, 1, 64, seq_k=512, dtype="bf16", block_size=(16, 128), block_mask=[[True] * 4])]
    for vid in ("cuda-mma-sync.attention", "cuda-wgmma.attention"):
        v = variants.resolve(vid)
        assert all(cores.hero_core(v, op).name == "attention-decode" for op in decode)
        assert all(cores.hero_core(v, op).name != "attention-decode" for op in prefill)


def test_checks_refuse_what_the_kernel_cannot_run():
    arch = _arch("sm_90a")
    v = type("V", (), {"id": "cuda-wgmma.attention"})()
    with pytest.raises(UnsupportedError, match="multiples of 16"):
        D.check(Attention(1, 4, 1, 72, seq_k=100, dtype="bf16"), v, Sched(), arch)
    with pytest.raises(UnsupportedError, match="block mask"):
        D.check(Attention(1, 4, 1, 64, seq_k=512, dtype="bf16", block_size=(16, 128), block_mask=[[True] * 4]),
                v, Sched(), arch)
    with pytest.raises(UnsupportedError, match="sm_80"):
        D.check(Attention(1, 4, 1, 64, seq_k=100, dtype="bf16"), v, Sched(), _arch("sm_75"))
    with pytest.raises(UnsupportedError, match="fp32"):
        D.check(Attention(1, 4, 1, 64, seq_k=100, dtype="fp32"), v, Sched(), arch)
    with pytest.raises(BadInputError, match="kw"):
        D.check(Attention(1, 4, 1, 128, seq_k=100, dtype="bf16"), v, Sched(kw=4), arch)
    with pytest.raises(BadInputError, match="split"):
        Sched(split=65).validate()
    with pytest.raises(BadInputError, match="warps"):
        Sched.from_json({**Sched().to_json(), "warps": 3})
    assert Sched.from_json(Sched(warps=8, stages=2, split=4).to_json()) == Sched(warps=8, stages=2, split=4)


def test_tma_loads_are_checked_and_searched_on_sm90_only():
    """TMA loads: refused before sm_90, at head dims no multiple of 64 and on pages a box cannot tile; a schedule
    saved before they existed reads as without; the space holds them on sm_90 only; their smem is the
    unpadded ring, 1024-byte aligned."""
    op = Attention(1, 8, 1, 128, seq_k=8192, kv_heads=2, dtype="bf16")
    with pytest.raises(BadInputError, match="sm_90"):
        Sched(bulk=True).validate(op, _arch("sm_80"))
    Sched(bulk=True).validate(op, _arch("sm_90a"))
    for bad, why in ((Attention(1, 8, 1, 96, seq_k=800, kv_heads=2, dtype="bf16"), "multiple of 64"),
                     (Attention(1, 8, 1, 64, seq_k=800, kv_heads=2, dtype="bf16", page_size=24), "pages of 24"),
                     (Attention(1, 8, 1, 64, seq_k=800, kv_heads=2, dtype="bf16", page_size=12), "pages of 12")):
        with pytest.raises(BadInputError, match=why):
            Sched(bulk=True).validate(bad, _arch("sm_90a"))
    for page in (8, 16, 32, 64, 128, 256):
        Sched(bulk=True).validate(Attention(1, 8, 1, 64, seq_k=800, kv_heads=2, dtype="bf16", page_size=page),
                                  _arch("sm_90a"))
    with pytest.raises(BadInputError, match="bulk"):
        Sched(bulk=1).validate()
    old = {k: v for k, v in Sched(warps=8).to_json().items() if k != "bulk"}
    assert Sched.from_json(old) == Sched(warps=8)
    assert Sched.from_json(Sched(bulk=True).to_json()) == Sched(bulk=True)
    assert Sched(bulk=True).smem_bytes(128) == 1024 + 2 * 3 * 64 * 256 + 16 * 272 + 8 * 3
    hero = D.hero_schedule(op, None)
    assert not any(s.bulk for s in D.search_space(op, hero, _arch("sm_80")))
    on90 = D.search_space(op, hero, _arch("sm_90a"))
    assert {s.name for s in on90 if s.bulk} >= {"w4_k64_s3_tma", "w8_k128_s3_tma", "w4_k128_s2_tma"}
    assert len(on90) == len(set(on90))


def test_two_blocks_an_sm_double_the_automatic_split_where_they_fit():
    """``ctas`` 2: the automatic split fills twice the SMs' slots (b8 h32/8 k8192: 4 slices a row tile for 256
    blocks, against 2), a fixed split refuses it, as do more than 4 warps, head dims past 128 (the kernel's
    launch bounds give two blocks there only) and a ring two of which an SM cannot hold; its JSON names it only
    when it is 2; the search space holds it."""
    from tracea.doctor.snapshot import probe
    from tracea.emitters.cuda.arch import target_host

    op = Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16")
    two = Sched(warps=4, stages=2, bulk=True, ctas=2)
    assert (D.splits(op, two, 132), D.splits(op, dataclasses.replace(two, ctas=1), 132)) == (4, 2)
    long = Attention(1, 32, 1, 128, seq_k=131072, kv_heads=8, dtype="bf16")
    assert 0.9 * 2 * 132 <= D.splits(long, two, 132) * long.kv_heads <= 2 * 132  # two blocks a SM, within a few
    two.validate(op, _arch("sm_90a"))
    for bad, why in ((dataclasses.replace(two, ctas=3), "ctas: expected"), (dataclasses.replace(two, ctas=True), "ctas"),
                     (dataclasses.replace(two, split=4), "automatic split"), (dataclasses.replace(two, warps=8), "4 warps"),
                     (dataclasses.replace(two, stages=6), "do not fit")):
        with pytest.raises(BadInputError, match=why):
            bad.validate(op, _arch("sm_90a"))
    with pytest.raises(BadInputError, match="head dim 128"):
        two.validate(Attention(1, 8, 1, 256, seq_k=800, kv_heads=2, dtype="bf16"), _arch("sm_90a"))
    assert "ctas" not in Sched().to_json() and Sched.from_json(two.to_json()) == two and two.name.endswith("_tma_b2")
    space = D.search_space(op, D.hero_schedule(op, None), _arch("sm_90a"))
    assert {s.ctas for s in space} == {1, 2} and all(s.warps <= 4 and not s.split for s in space if s.ctas == 2)
    assert D.hero_schedule(op, target_host(probe(), "sm_90a")).ctas == 1


@pytest.mark.parametrize("page", [0, 16, 64])
def test_tma_kernels_compile_without_spills(nvrtc, page):
    """TMA loads at head dims 64, 128 and 256, contiguous and paged (with lengths), for sm_90a; the maps come
    last among the parameters."""
    from tracea.emitters.nvrtc import compile_with_report, options_for

    for d in (64, 128, 256):
        op = Attention(4, 32, 1, d, seq_k=4096, kv_heads=8, dtype="bf16", page_size=page or None,
                       seq_lens=(4096, 100, 1, 3000) if page else None)
        r, _ = D.render(op, dataclasses.replace(D.hero_schedule(op, None), bulk=True), _arch("sm_90a"))
        assert r.params[-2:] == ("tmk", "tmv") and "_tma" in r.name
        code, log = compile_with_report(r.source, r.name + ".cu", None, options_for("sm_90a"))
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert m and m.groups() == ("0", "0", "0"), (r.name, log[-300:])


def _arch(name: str):
    from tracea.emitters.cuda.arch import parse_arch

    return dataclasses.replace(parse_arch(name), sm_count=132)


@pytest.fixture(scope="module")
def nvrtc():
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    return find_nvrtc()


@pytest.mark.parametrize("head_dim", [32, 64, 80, 96, 128, 160, 256])
def test_hero_kernels_compile_without_spills(nvrtc, head_dim):
    from tracea.emitters.nvrtc import compile_with_report, options_for

    for arch in ("sm_90a", "sm_80"):
        for op in (Attention(2, 8, 1, head_dim, seq_k=5000, kv_heads=2, dtype="bf16"),
                   Attention(1, 4, 3, head_dim, seq_k=700, kv_heads=4, dtype="fp16", causal=True)):
            r, scalars = D.render(op, D.hero_schedule(op, None), _arch(arch))
            code, log = compile_with_report(r.source, r.name + ".cu", None, options_for(arch))
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
            assert m and m.groups() == ("0", "0", "0"), (arch, r.name, log[-300:])
            assert r.params[-len(D.SERVING_PARAMS):] == D.SERVING_PARAMS and r.grid[1:] == (op.kv_heads, op.batch)
            assert (r.metadata["workspace_bytes"] > 0) == (r.metadata["key_slices"]["splits"] > 1)


@pytest.mark.parametrize("page", [0, 16, 64, 24])
def test_serving_kernels_compile_without_spills(nvrtc, page):
    """Lengths read at run time, and pages of 16, 64 and (not a power of two) 24 keys, at head dims 64 and 128."""
    from tracea.emitters.nvrtc import compile_with_report, options_for

    for arch in ("sm_90a", "sm_80"):
        for d in (64, 128):
            op = Attention(4, 32, 1, d, seq_k=4096, kv_heads=8, dtype="bf16", seq_lens=(4096, 100, 1, 3000),
                           page_size=page or None)
            r, scalars = D.render(op, D.hero_schedule(op, None), _arch(arch))
            assert ("_r" in r.name) and (f"_p{page}" in r.name) == bool(page)
            assert scalars["table_cols"] == op.table_cols and scalars["pages"] == (op.pages or 1)
            code, log = compile_with_report(r.source, r.name + ".cu", None, options_for(arch))
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
            assert m and m.groups() == ("0", "0", "0"), (arch, r.name, log[-300:])


def test_the_launch_arguments_follow_the_rendered_parameters():
    """The host object's arguments (without a GPU: the packing alone, on a stand-in): every parameter in the
    rendered order, the workspace's pointer last, 0 for a buffer the kernel does not hold (the plan's)."""
    from types import SimpleNamespace

    from tracea.emitters.cuda.attention_runtime import AttentionKernel

    op = Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16")
    r, scalars = D.render(op, D.hero_schedule(op, None), _arch("sm_90a"))
    held = {n: SimpleNamespace(ptr=0x1000 * (i + 1)) for i, n in enumerate(("q", "k", "v", "out", "lse", "workspace"))}
    args = AttentionKernel._args(SimpleNamespace(rendered=r, _dbuf=held, _scalars=scalars))
    assert len(args) == len(r.params) and r.params[-len(D.SERVING_PARAMS):] == D.SERVING_PARAMS
    by_name = dict(zip(r.params, args, strict=True))
    assert int(by_name["workspace"]) == 0x6000 and int(by_name["q"]) == 0x1000 and int(by_name["tile_ptr"]) == 0
    assert int(by_name["seq_k"]) == 8192 and abs(float(by_name["scale_log2"]) - scalars["scale_log2"]) < 1e-6
    assert int(by_name["block_table"]) == 0 and int(by_name["seq_lens"]) == 0  # a plain op has neither
    paged = Attention(2, 8, 1, 64, seq_k=100, kv_heads=2, dtype="bf16", seq_lens=(100, 7), page_size=16)
    r, scalars = D.render(paged, D.hero_schedule(paged, None), _arch("sm_90a"))
    held = {**held, "block_table": SimpleNamespace(ptr=0x7000), "seq_lens": SimpleNamespace(ptr=0x8000)}
    by_name = dict(zip(r.params, AttentionKernel._args(SimpleNamespace(rendered=r, _dbuf=held, _scalars=scalars)),
                       strict=True))
    assert int(by_name["block_table"]) == 0x7000 and int(by_name["seq_lens"]) == 0x8000
    assert int(by_name["table_cols"]) == 7 and int(by_name["pages"]) == 14


def test_the_paged_hero_takes_128_key_tiles_only_where_they_fit():
    """A paged cache without lengths over head dims 65-128 takes 32 keys a warp where the target's shared memory
    holds them (sm_90a); on sm_80 (167 KB) d112 and d128 keep 64-key tiles, as does every host-less render."""
    from tracea.doctor.snapshot import probe
    from tracea.emitters.cuda.arch import parse_arch, target_host

    host = probe()
    for arch in ("sm_80", "sm_90a"):
        target = target_host(host, arch)
        for d in (64, 96, 112, 128, 160):
            op = Attention(8, 32, 1, d, seq_k=4096, kv_heads=8, dtype="bf16", page_size=16)
            s = D.hero_schedule(op, target)
            D.check(op, type("V", (), {"id": "cuda-wgmma.attention"})(), s, parse_arch(arch))  # it fits the target
            wide = dataclasses.replace(s, kw=2).smem_bytes(d) <= parse_arch(arch).smem_optin
            want = 2 if 64 < d <= 128 and wide else 1
            assert s.kw == want, (arch, d, s)
    assert D.hero_schedule(Attention(8, 32, 1, 128, seq_k=4096, kv_heads=8, dtype="bf16", page_size=16), None).kw == 1
    ragged = Attention(8, 32, 1, 128, seq_k=4096, kv_heads=8, dtype="bf16", page_size=16, seq_lens=(4096,) * 8)
    assert D.hero_schedule(ragged, target_host(host, "sm_90a")).kw == 1


def test_the_sm90_hero_of_small_pages_with_lengths_takes_64_key_tiles():
    """On sm_90a the TMA hero at head dim 128 is 8 warps of 128-key tiles, but a paged cache with per-entry lengths
    and pages under 128 keys takes 4 warps of 64-key tiles (an H200, the 1k-16k row paged by 16 with the run-time
    slice rule: 0.1865 ms against the wide tile's 0.2044); pages of 128 and caches without lengths keep the wide
    tile."""
    from tracea.doctor.snapshot import probe
    from tracea.emitters.cuda.arch import target_host

    target = target_host(probe(), "sm_90a")

    def hero(**kw):
        s = D.hero_schedule(Attention(8, 32, 1, 128, seq_k=4096, kv_heads=8, dtype="bf16", **kw), target)
        return s.warps, s.bk, s.bulk

    lens = (4096, 100, 3000, 7, 4096, 2000, 1, 900)
    assert hero(page_size=16, seq_lens=lens) == (4, 64, True)
    assert hero(page_size=64, seq_lens=lens) == (4, 64, True)
    assert hero(page_size=128, seq_lens=lens) == (8, 128, True)
    assert hero(page_size=16) == (8, 128, True)
    assert hero(seq_lens=lens) == (8, 128, True)
    assert hero() == (8, 128, True)
