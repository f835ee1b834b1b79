"""The Hopper wgmma attention kernel without a GPU: NVRTC compiles at sm_90a (0 spills, the setmaxnreg
split), the schedule's JSON and checks, the fragment and shared-memory index maps against the PTX ISA's
definitions, and a NumPy model of the kernel's walk (plan entries, element test on partial tiles only,
exp2 online softmax, lse) against the float64 reference. GPU runs: test_cuda_wgmma_attention_gpu.py."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters.cuda.attention_plan import LOG2E, PARAMS, mask_scalars, tile_plan
from tracea.emitters.cuda.hopper import attention as A
from tracea.emitters.cuda.hopper.attention_schedule import (
    AttnWgmmaSchedule,
    hero_schedule,
    search_space,
    smem_plan,
)
from tracea.emitters.layout import TileLayout, TmaSwizzle
from tracea.kernels import Attention
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, lse_error


@pytest.fixture(autouse=True)
def _cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


# ------------------------------------------------------------------------------------------ compiles


COMPILES = [
    (Attention(2, 8, 1000, 64, kv_heads=2, dtype="bf16", causal=True), None),
    (Attention(1, 4, 4096, 128, dtype="bf16"), None),
    (Attention(1, 4, 300, 128, dtype="fp16", window=(100, 5)), AttnWgmmaSchedule(stages=2, pingpong=False, intra=False)),
    (Attention(1, 4, 300, 128, dtype="bf16", causal=True), AttnWgmmaSchedule(consumers=1, pingpong=False)),
    (Attention(1, 2, 512, 256, dtype="bf16", causal=True), None),
    (Attention(1, 2, 512, 256, seq_k=256, dtype="fp16", block_size=(128, 128), block_mask=("10", "11", "01", "11")),
     AttnWgmmaSchedule(bk=64, stages=2, pingpong=False, intra=True)),
    (Attention(2, 4, 1000, 64, dtype="bf16", causal=True), AttnWgmmaSchedule(bk=128, stages=2, consumers=3)),
    (Attention(16, 32, 512, 64, dtype="fp16"),
     AttnWgmmaSchedule(bk=128, stages=2, consumers=3, persistent=True, q_buffers=2)),
    # head dims that are no multiple of 64: 64B-swizzled chunks of 32 (32, 96, 160) or 32B ones of 16 (80)
    (Attention(4, 32, 4096, 80, dtype="bf16"), None),
    (Attention(2, 8, 1000, 96, kv_heads=2, dtype="fp16", causal=True), None),
    (Attention(1, 4, 300, 32, dtype="bf16", window=(100, 5)), None),
    (Attention(1, 4, 4096, 160, dtype="bf16", causal=True), None),
    (Attention(1, 2, 512, 192, dtype="bf16"), None),
    (Attention(1, 2, 512, 240, dtype="fp16", causal=True), None),
    (Attention(16, 32, 512, 48, dtype="bf16"), AttnWgmmaSchedule(stages=2, persistent=True, q_buffers=2)),
    (Attention(1, 4, 1000, 112, dtype="bf16", causal=True), AttnWgmmaSchedule(bk=128, stages=2, intra=False,
                                                                               split_kv=True)),
]


@pytest.mark.parametrize("op,sched", COMPILES, ids=lambda x: getattr(x, "signature", getattr(x, "name", ""))[:50])
def test_compiles_at_sm90a_without_spills(op, sched):
    pytest.importorskip("cuda.core")
    from tracea.emitters import nvrtc as nv

    sched = sched or hero_schedule(op)
    r, scalars = A.render(op, sched)
    _, res, log, _, _ = nv.compile_cached(r.source, r.name, r.entry, "sm_90a")
    assert res.spills == 0 and res.stack_frame == 0, log
    entry, producer, consumer = sched.register_split()
    assert 0 < res.regs_per_thread <= min(255, 65536 // sched.threads) and entry <= 65536 // sched.threads
    assert f"setmaxnreg.dec.sync.aligned.u32 {producer};" in r.source
    assert f"setmaxnreg.inc.sync.aligned.u32 {consumer};" in r.source
    assert consumer >= sched.consumer_registers(op.head_dim)
    assert "serialized" not in log  # ptxas did not have to serialise the wgmma pipeline
    assert r.smem == sched.smem_bytes(op.head_dim) <= 232448
    assert scalars == mask_scalars(op)


def test_signature_names_the_shared_params_in_order():
    op = Attention(1, 2, 100, 128, dtype="bf16")  # one block per item (head dim 64 this short is persistent)
    r, _ = A.render(op, hero_schedule(op))
    assert r.params[:len(PARAMS)] == PARAMS and r.params == A.KERNEL_PARAMS
    sig = r.source.split(f"{A.KERNEL_NAME}(", 1)[1].split(")", 1)[0]
    names = [re.findall(r"(\w+)\s*$", p.strip())[0] for p in sig.split(",")]
    assert tuple(names) == A.KERNEL_PARAMS
    assert r.grid[0] == -(-op.seq_q // 128) * op.heads * op.batch


# ------------------------------------------------------------------------------------------ schedule


def test_schedule_json_round_trip_and_hero_per_head_dim():
    for d in range(32, 257, 16):
        op = Attention(1, 2, 100, d, dtype="bf16")
        s = hero_schedule(op)
        s.validate(op)
        assert AttnWgmmaSchedule.from_json(s.to_json()) == s
        if d == 64:  # two blocks an SM (test_hero_runs_two_blocks_an_sm_at_head_dim_64)
            assert s.ctas == 2 and s.to_json()["ctas"] == 2
            continue
        assert "ctas" not in s.to_json()  # a schedule saved before the field reads as one block an SM
        assert s.bq == 128 and s.bk == (64 if d > 192 else 96 if d in (144, 160, 192) else 128), d
        assert s.intra == (d <= 192) and s.stages == (2 if d in (176, 192, 240, 256) else 4 if d <= 96 else 3), d
    space = search_space(Attention(1, 2, 100, 128, dtype="fp16"))
    assert len(space) > 10 and len(set(space)) == len(space)


@pytest.mark.parametrize("d,seq,window,two", [
    (64, 512, None, True), (64, 2049, None, True), (64, 8192, (256, 0), True), (64, 16384, None, True),
    (128, 512, None, False), (128, 8192, (256, 0), False), (256, 512, None, False), (80, 512, None, False)])
def test_hero_runs_two_blocks_an_sm_at_head_dim_64(d, seq, window, two):
    """Head dim 64, any length: two blocks an SM, persistent, 64-key tiles, neither overlap (measured faster on
    an H200 on short items, narrow windows and long causal rows alike); other head dims keep one block an SM."""
    op = Attention(16, 4, 64, d, seq_k=seq, dtype="bf16", window=window)
    s = hero_schedule(op)
    s.validate(op)
    assert (s.ctas == 2, s.persistent) == (two, two)
    if two:
        assert (s.bk, s.stages, s.consumers, s.pingpong, s.intra) == (64, 3, 2, False, False)
        assert s.register_split() == (80, 24, 104) and s.consumer_registers(d) <= 104
        assert 2 * (s.smem_bytes(d) + 1024) <= 228 * 1024
        assert s in search_space(op)


@pytest.mark.parametrize("fields,needle", [
    (dict(bk=72), "bk"), (dict(bk=0), "bk"), (dict(consumers=4), "consumers"), (dict(stages=1), "stages"),
    (dict(consumers=1, pingpong=True), "pingpong"), (dict(intra=1), "intra"), (dict(bk=256), "bk"),
    (dict(stages=8, bk=64), "stages"), (dict(ctas=3), "ctas"), (dict(ctas=0), "ctas"), (dict(ctas=True), "ctas"),
    (dict(bk=64, stages=2, consumers=1, pingpong=False, ctas=2), "ctas"),  # 160 KiB at head dim 256: over half an SM
])
def test_schedule_validation_names_the_field(fields, needle):
    with pytest.raises(BadInputError, match=needle):
        AttnWgmmaSchedule(**fields).validate(Attention(1, 2, 100, 256, dtype="bf16"))


def test_two_blocks_an_sm_are_refused_where_registers_run_short():
    """Half the register file: 104 a consumer thread, so 128-key tiles at head dim 64 (S, P and O ~128) are refused
    with the field that costs them; the schedule's JSON keeps ``ctas`` and reads it back."""
    op = Attention(1, 2, 100, 64, dtype="bf16")
    with pytest.raises(BadInputError, match="bk"):
        AttnWgmmaSchedule(bk=128, stages=2, pingpong=False, intra=False, ctas=2).validate(op)
    s = AttnWgmmaSchedule(bk=64, stages=3, pingpong=False, intra=False, ctas=2)
    s.validate(op)
    assert AttnWgmmaSchedule.from_json(s.to_json()) == s and s.name.endswith("_b2")
    r, _ = A.render(op, s)
    assert "__launch_bounds__(384, 2)" in r.source and "setmaxnreg.inc.sync.aligned.u32 104" in r.source
    assert r.metadata["tile"]["ctas"] == 2 and "ctas" not in A.render(op, hero_schedule(Attention(1, 2, 100, 128,
                                                                                               dtype="bf16")))[0].metadata["tile"]
    short = Attention(16, 32, 512, 64, dtype="bf16")  # 2048 items: two blocks on each of 132 SMs
    pe = dataclasses.replace(s, persistent=True)
    assert A.render(short, pe)[0].grid == (264, 1, 1) and A.grid_blocks(short, pe, 100) == 200
    assert A.grid_blocks(Attention(1, 2, 300, 64, dtype="bf16"), pe, 132) == 6  # never more blocks than items
    assert pe.features(short)["ctas"] == 2.0
    assert dataclasses.replace(pe, ctas=None).features(short)["ctas"] == 1.0  # a recorded schedule, not validated
    packed = Attention(4, 4, 300, 64, seq_k=300, dtype="bf16", seq_lens=(300, 17, 0, 250), packed=True)
    assert not any(x.ctas == 2 for x in search_space(packed))  # not measured with two blocks an SM


def test_schedule_rejects_other_ops_and_dtypes():
    with pytest.raises(BadInputError, match="dtype"):
        AttnWgmmaSchedule().validate(Attention(1, 2, 100, 128))
    with pytest.raises(BadInputError, match="head_dim"):  # a multiple of 8 below the kernel's 32
        AttnWgmmaSchedule().validate(Attention(1, 2, 100, 24, dtype="bf16"))
    AttnWgmmaSchedule().validate(Attention(1, 2, 100, 72, dtype="bf16"))  # an odd multiple of 8: padded to 80
    with pytest.raises(BadInputError, match="unknown field"):
        AttnWgmmaSchedule.from_json({"bk": 64, "bm": 3})
    with pytest.raises(BadInputError, match="not a cuda-wgmma attention"):
        AttnWgmmaSchedule.from_json({"core": "wgmma"})


# ------------------------------------------------------------------------------------------ index maps


def test_p_fragment_is_the_ptx_register_a_layout():
    """Register i of P (packing accumulators 2i and 2i + 1) must hold, for k16 step t = i // 4 and A
    register a = i % 4, the PTX ISA's m64k16 A fragment: row 16 w + lane / 4 + 8 (a % 2), key
    16 t + 2 (lane % 4) + 8 (a // 2) + half."""
    bk = 128
    frag = A.fragment_model(bk)
    w, lane, t, a, half = np.meshgrid(np.arange(4), np.arange(32), np.arange(bk // 16), np.arange(4), np.arange(2),
                                      indexing="ij")
    np.testing.assert_array_equal(frag[..., 0], 16 * w + lane // 4 + 8 * (a % 2))
    np.testing.assert_array_equal(frag[..., 1], 16 * t + 2 * (lane % 4) + 8 * (a // 2) + half)
    acc = A.accumulator_model(bk)  # every (row, col) of the 64 x bk tile exactly once
    flat = acc.reshape(-1, 2)
    assert len({(int(r), int(c)) for r, c in flat}) == 64 * bk


def test_smem_tiles_are_swizzle_atoms_and_v_strides():
    """Q/K/V tiles: a 128-byte line per row (a head-dim chunk of 64), the 128B pattern repeating every 8
    lines for boxes taller than 64 (what the descriptors with SBO = 1024 assume); V's LBO is one chunk."""
    for rows in (64, 128, 176):
        lay = TileLayout(rows, 64, 2, "row", swizzle=TmaSwizzle("128B"))
        r, c = np.meshgrid(np.arange(rows), np.arange(64), indexing="ij")
        got = np.vectorize(lay.offset)(r, c)
        np.testing.assert_array_equal(got, r * 128 + (((c // 8) ^ (r % 8)) * 16) + (c % 8) * 2)
    for d, s in ((128, AttnWgmmaSchedule()), (256, AttnWgmmaSchedule(bk=64))):
        lbo, sbo = A._v_strides(s, d)
        assert (lbo, sbo) == (s.bk * 128, 1024)
        op = Attention(1, 1, 10, d, dtype="bf16")
        assert f"tr_desc(vs + t * 2048u, {lbo}u, {sbo}u)" in A.render(op, s)[0].source
        plan = smem_plan(s, d)
        assert plan["bars"] + 8 * (3 * s.stages + 1) + 1024 <= s.smem_bytes(d)


@pytest.mark.parametrize("d,mode", [(32, "64B"), (96, "64B"), (160, "64B"), (48, "32B"), (80, "32B"), (240, "32B"),
                                    (192, "128B")])
def test_narrow_head_dims_take_the_widest_swizzle_that_divides_them(d, mode):
    """A head dim that is no multiple of 64 is split into chunks of 32 (64B swizzle) or 16 (32B): the TMA
    pattern (PTX ISA: 16-byte chunk c of line r at c ^ ((r >> 1) & 3) at 64B, c ^ ((r >> 2) & 1) at 32B),
    descriptors with that layout type (2: 64B, 3: 32B) and SBO of 8 lines, V's LBO one chunk of key lines,
    k16 steps of 32 bytes within a line, and TMA boxes one chunk wide."""
    from tracea.emitters.cuda.hopper.attention_device import head_chunk, line_bytes, swizzle_mode

    chunk, line = head_chunk(d), line_bytes(d)
    assert swizzle_mode(d) == mode and line == int(mode[:-1]) and d % chunk == 0 and 2 * chunk == line
    lay = TileLayout(128, chunk, 2, "row", swizzle=TmaSwizzle(mode))
    r, c = np.meshgrid(np.arange(128), np.arange(chunk), indexing="ij")
    xor = {"128B": r % 8, "64B": (r >> 1) & 3, "32B": (r >> 2) & 1}[mode]
    np.testing.assert_array_equal(np.vectorize(lay.offset)(r, c), r * line + (((c // 8) ^ xor) * 16) + (c % 8) * 2)
    s = hero_schedule(Attention(1, 2, 300, d, dtype="bf16"))
    op = Attention(1, 2, 300, d, dtype="bf16", causal=True)
    src = A.render(op, s)[0].source
    assert A._v_strides(s, d) == (s.bk * line, 8 * line)
    if mode == "128B":
        assert "tr_desc64" not in src and "tr_desc32" not in src and "tr_desc(vs + t * 2048u" in src
        return
    layout_type = {"64B": 2, "32B": 3}[mode]
    assert f"| ({layout_type}ull << 62);" in src
    assert f"tr_desc{line}(vs + t * {16 * line}u, {s.bk * line}u, {8 * line}u)" in src
    assert f"for (int kk = 0; kk < {line // 32}; ++kk)" in src and f"for (int c = 0; c < {d // chunk}; ++c)" in src
    assert f"&tmK, c * {chunk}, kt * {s.bk}" in src and f"{line}B swizzle" in A.render(op, s)[0].metadata["fragments"]["load"]
    plan = smem_plan(s, d)
    assert all(plan[x] % (8 * line) == 0 for x in ("k", "v", "stage", "bars"))


# ------------------------------------------------------------------------------------------ the walk


from tracea.emitters.cuda.hopper.attention_device import RESCALE_SLACK  # noqa: E402 - a row keeps its maximum within it

KEPT = [0]  # the model's count of rows that kept a stale reference maximum (the conditional rescale taken)


def kernel_model(op: Attention, sched: AttnWgmmaSchedule, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's algorithm in NumPy (float64 arithmetic, fp32 where it matters not): per (batch, head,
    q tile), the plan's entries in order, the element test only on partial ones, the log2-domain online
    softmax with the -inf guard, O /= l, lse = (m + log2 l) ln 2; rows past seq_q dropped."""
    plan = tile_plan(op, sched.bq, sched.bk)
    sc = mask_scalars(op)
    q, k, v = (to_float64(inputs[x], op.dtype) for x in ("q", "k", "v"))
    out = np.full(op.output_shape(), np.nan)
    lse = np.full(op.lse_shape(), np.nan)
    group = op.heads // op.kv_heads
    for b in range(op.batch):
        for h in range(op.heads):
            kvh = h // group
            for t in plan.order:
                rows = np.arange(t * sched.bq, (t + 1) * sched.bq)
                qt = np.zeros((sched.bq, op.head_dim))
                live = rows < op.seq_q
                qt[live] = q[b, h, rows[live]]
                m = np.full(sched.bq, -np.inf)
                lsum = np.zeros(sched.bq)
                o = np.zeros((sched.bq, op.head_dim))
                for kt, partial in plan.entries(t):
                    cols = np.arange(kt * sched.bk, (kt + 1) * sched.bk)
                    kk, vv = np.zeros((sched.bk, op.head_dim)), np.zeros((sched.bk, op.head_dim))
                    inb = cols < op.seq_k
                    kk[inb], vv[inb] = k[b, kvh, cols[inb]], v[b, kvh, cols[inb]]
                    s = qt @ kk.T
                    if partial:
                        keep = np.zeros(s.shape, bool)
                        ok = live[:, None] & inb[None, :]
                        ri, ci = np.nonzero(ok)
                        keep[ri, ci] = op.keep_mask(0, op.seq_q, 0, op.seq_k)[rows[ri], cols[ci]]
                        s[~keep] = -np.inf
                    mtile = np.maximum(m, s.max(axis=1) * sc["scale_log2"])
                    slack = RESCALE_SLACK if op.head_dim >= 256 else 0.0  # the kernel's: head dim 256 only
                    with np.errstate(invalid="ignore"):  # -inf - -inf: NaN, not kept (the kernel's test)
                        mnew = np.where(mtile - m <= slack, m, mtile)
                    muse = np.where(mnew == -np.inf, 0.0, mnew)
                    corr = np.exp2(m - muse)
                    p = np.exp2(s * sc["scale_log2"] - muse[:, None])
                    assert not (p > 256.0).any()  # P <= 2^8: in bf16 and fp16 range whatever the slack says
                    KEPT[0] += int(((mtile > m) & (mnew == m)).sum())  # rows that kept a maximum under the tile's
                    lsum = lsum * corr + p.sum(axis=1)
                    o = o * corr[:, None] + p @ vv
                    m = mnew
                with np.errstate(divide="ignore"):
                    safe = np.where(lsum > 0, lsum, 1.0)
                    res_o = np.where(lsum[:, None] > 0, o / safe[:, None], 0.0)
                    res_l = np.where(lsum > 0, (m + np.log2(safe)) / LOG2E, -np.inf)
                out[b, h, rows[live]] = res_o[live]
                lse[b, h, rows[live]] = res_l[live]
    return out, lse


MODEL_CASES = [
    Attention(1, 2, 17, 64, dtype="bf16", causal=True),
    Attention(1, 4, 300, 64, kv_heads=2, seq_k=190, dtype="bf16", causal=True),
    Attention(1, 2, 200, 64, seq_k=450, dtype="fp16", window=(90, 20)),
    Attention(1, 2, 260, 64, dtype="bf16", block_size=(96, 80),
              block_mask=("0100", "1011", "0010")),
]


@pytest.mark.parametrize("op", MODEL_CASES, ids=lambda op: op.signature[:50])
def test_kernel_walk_model_matches_the_reference(op):
    inputs = op.random_inputs(np.random.default_rng(4))
    for sched in (hero_schedule(op), AttnWgmmaSchedule(bk=64, consumers=1, pingpong=False)):
        out, lse = kernel_model(op, sched, inputs)
        ref, ref_lse = op.reference_with_lse(inputs)
        np.testing.assert_allclose(out, ref, atol=1e-9)
        assert lse_error(lse, ref_lse) <= LSE_TOLERANCE * 1e-3


def test_conditional_rescaling_is_exact_when_the_maximum_climbs_by_small_steps():
    """Scores that rise key tile by key tile, some by less than the slack and some by more: the model (the
    kernel's algorithm, rows keeping a stale reference maximum) still gives the reference's O and lse."""
    op = Attention(1, 1, 64, 256, dtype="fp16")  # head dim 256: where the kernel rescales conditionally
    rng = np.random.default_rng(7)
    q = np.zeros((1, 1, 64, 256))
    q[..., 0] = 1.0
    k = rng.standard_normal((1, 1, 64, 256)) * 0.1
    # scale_log2 = log2(e) / 16: steps of 60 and 50 (5.4 and 4.5 in log2, under the slack; 9.9 together, over)
    # and 90 (8.1, over)
    k[..., 0] = np.repeat([0.0, 60.0, 110.0, 200.0], 16)
    v = rng.standard_normal((1, 1, 64, 256))
    inputs = {n: x.astype(np.float16) for n, x in (("q", q), ("k", k), ("v", v))}
    assert RESCALE_SLACK <= 8  # P <= 2^8 (the kernel packs P to 16 bits)
    for case in (op, dataclasses.replace(op, causal=True), dataclasses.replace(op, window=(20, 3))):
        KEPT[0] = 0
        out, lse = kernel_model(case, AttnWgmmaSchedule(bk=16, stages=2, intra=False), inputs)
        ref, ref_lse = case.reference_with_lse(inputs)
        np.testing.assert_allclose(out, ref, atol=1e-9)
        assert lse_error(lse, ref_lse) <= LSE_TOLERANCE * 1e-3
        assert KEPT[0] > 0, case.signature  # the stale-maximum path was taken, not only the exact one
    # the kernel: the slack and the skipped rescale at head dim 256, neither at 64 or 128
    from tracea.emitters.cuda.hopper.attention import render_source

    for d, want in ((256, True), (128, False), (64, False)):
        src = render_source(Attention(1, 2, 300, d, dtype="bf16", causal=True), AttnWgmmaSchedule(bk=64, stages=2, intra=False))
        assert (f"mtile - m[r] <= {RESCALE_SLACK}.0f ? m[r] : mtile" in src) == want, d
        assert ("if (corr[0] == 1.0f && corr[1] == 1.0f) return;" in src) == want, d


def test_core_hooks_check_the_target_and_precision():
    from tracea.doctor.errors import UnsupportedError
    from tracea.emitters.cuda.arch import parse_arch
    from tracea.emitters.cuda.hopper import attention_schedule as S
    from tracea.emitters.cuda.variants import resolve

    v = resolve("cuda-wgmma.attention")
    op = Attention(1, 2, 100, 128, dtype="bf16", causal=True)
    hero = S.hero_schedule(op)
    S.check(op, v, hero, parse_arch("sm_90a"))
    assert S.AttnWgmmaSchedule.from_json(hero.to_json()) == hero
    features = hero.features(op)
    assert (features["warps"], features["smem_bytes"]) == (12, hero.smem_bytes(128)) and hero.smem_bytes(128) <= 230480
    with pytest.raises(UnsupportedError, match="sm_90"):
        S.check(op, v, hero, parse_arch("sm_80"))
    with pytest.raises(UnsupportedError, match="sm_90a"):
        S.check(op, v, hero, parse_arch("sm_90"))
    with pytest.raises(UnsupportedError, match="fp32"):
        S.check(Attention(1, 2, 100, 128), v, hero, parse_arch("sm_90a"))
    with pytest.raises(BadInputError, match="schedule"):
        S.check(op, v, object(), parse_arch("sm_90a"))


def test_three_consumers_pass_the_turn_round_all_three():
    """The ping-pong source for 3 consumers: each waits on its own named barrier and passes to the next in the
    round; the last opens the round and passes none after its last turn. Two consumers render as before."""
    op = Attention(1, 2, 300, 64, dtype="bf16")
    r, _ = A.render(op, AttnWgmmaSchedule(bk=128, stages=2, consumers=3))
    assert "tr_bar_sync(1 + cw, 256);" in r.source
    assert "tr_bar_arrive(1 + (cw + 1) % 3, 256);" in r.source and "if (cw == 2) tr_bar_arrive(1, 256);" in r.source
    assert "2 - cw" not in r.source
    two, _ = A.render(op, AttnWgmmaSchedule(bk=128, stages=2))
    assert "tr_bar_arrive(2 - cw, 256);" in two.source and "(cw + 1) %" not in two.source
    assert AttnWgmmaSchedule(consumers=3).register_split() == (128, 24, 160)
