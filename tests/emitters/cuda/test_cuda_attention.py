"""The mma.sync attention core without a GPU: NVRTC compiles for sm_80 and sm_90a with no spills over head
dims and masks, schedules round-trip through JSON and bad ones are refused, the launch order rides in
tile_ptr, and a NumPy model of the kernel's fragment addressing (swizzle, ldmatrix lanes, the C-to-A reuse
of P) reproduces Q K^T and P V."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters import cuda
from tracea.emitters.cuda.attention import AttentionMmaSchedule, plan_arrays, search_space
from tracea.emitters.cuda.attention_plan import PARAMS, tile_plan
from tracea.emitters.cuda.build import compile_kernel
from tracea.kernels.ops.attention import Attention

VID = "cuda-mma-sync.attention"


class NoGpu:
    nvidia = None


HOST = NoGpu()


@pytest.fixture(autouse=True)
def _kernel_cache(kernel_home, monkeypatch):
    monkeypatch.setenv("TRACEA_HOME", str(kernel_home))


def _mask_op(**kw) -> Attention:
    base = Attention(1, 2, 300, 128, dtype="bf16", block_size=(48, 80), **kw)
    keep = np.random.default_rng(0).random(base.grid()) < 0.4
    return Attention(1, 2, 300, 128, dtype="bf16", block_size=(48, 80), block_mask=keep, **kw)


OPS = [
    Attention(4, 32, 4096, 128, dtype="bf16"),
    Attention(4, 32, 4096, 128, dtype="fp16", causal=True),
    Attention(16, 32, 512, 64, dtype="bf16"),
    Attention(1, 32, 16384, 64, dtype="fp16", causal=True),
    Attention(16, 32, 512, 256, dtype="bf16"),
    Attention(1, 4, 1000, 256, dtype="fp16", window=(100, 0)),
    Attention(2, 8, 257, 128, kv_heads=2, dtype="bf16", causal=True),
    Attention(1, 32, 16384, 128, dtype="bf16", window=(1024, 1024)),
    _mask_op(),
    # head dims that are no multiple of 64: rows padded by 16 bytes instead of the XOR swizzle
    Attention(4, 32, 4096, 80, dtype="bf16"),
    Attention(4, 16, 4096, 96, dtype="fp16", causal=True),
    Attention(2, 8, 257, 32, kv_heads=2, dtype="bf16", causal=True),
    Attention(1, 4, 1000, 160, dtype="bf16", window=(100, 0)),
]


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.signature[:60])
def test_hero_compiles_without_spills(op, arch):
    sched = cuda.hero_schedule(op, VID, HOST)
    _, r, scalars, art = compile_kernel(op, VID, sched, HOST, arch)
    res = art.metadata["resources"]
    assert res["spills"] == 0 and res["stack_frame"] == 0, f"{r.name} on {arch}: {res}"
    assert 0 < res["regs_per_thread"] <= 255
    assert r.params == PARAMS and set(scalars) == set(PARAMS[8:])
    assert r.grid == (-(-op.seq_q // sched.bq), op.heads, op.batch) and r.block == (sched.threads, 1, 1)
    assert r.smem == sched.smem_bytes(op.head_dim) <= (232448 if arch == "sm_90a" else 166912)


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
def test_every_head_dim_compiles_without_spills(arch):
    """Every multiple of 16 from 32 to 256 and odd multiples of 8 at both ends and between (computed over the
    next multiple of 16): the hero at a long and a short sequence (128- and 64-row blocks)."""
    from tracea.emitters.cuda.attention import HEAD_DIMS

    assert HEAD_DIMS == tuple(range(32, 257, 8))
    for d in [d for d in HEAD_DIMS if d % 16 == 0] + [40, 72, 136, 248]:
        for op in (Attention(4, 32, 4096, d, dtype="bf16", causal=True), Attention(1, 2, 200, d, dtype="fp16")):
            sched = cuda.hero_schedule(op, VID, HOST)
            r, art = compile_kernel(op, VID, sched, HOST, arch)[1::2]
            res = art.metadata["resources"]
            assert res["spills"] == 0 and res["stack_frame"] == 0, (d, sched, res)
            dp = -(-d // 16) * 16
            assert r.smem == sched.smem_bytes(d) == (2 * dp + (16 if d % 64 else 0)) * (sched.bq + 4 * sched.bk)
            assert ("#define ROWB (HDP * 2 + 16)" in r.source) == (d % 64 != 0)
            assert f"#define HD {d}\n" in r.source and f"#define HDP {dp} " in r.source


@pytest.mark.parametrize("arch", ("sm_80", "sm_90a"))
def test_every_schedule_of_the_space_compiles_without_spills(arch):
    for d in (64, 128, 256, 80, 160, 240):
        op = Attention(1, 2, 200, d, dtype="bf16", causal=True)
        space = cuda.search_space(op, VID, HOST, arch)
        assert space[0] == cuda.hero_schedule(op, VID, HOST) and len(set(space)) == len(space) > 1
        for s in space:
            res = compile_kernel(op, VID, s, HOST, arch)[3].metadata["resources"]
            assert res["spills"] == 0, (d, s, res)


def test_schedule_json_round_trip_and_core_lookup():
    op = Attention(1, 2, 100, 64, dtype="bf16")
    for s in (AttentionMmaSchedule(), AttentionMmaSchedule(bq=64, bk=32, stages=3, order="natural"),
              AttentionMmaSchedule(bk=32, warp_rows=32)):
        j = s.to_json()
        assert j["core"] == "attention-mma" and cuda.schedule_from_json(j) == s
    hero = cuda.hero_schedule(op, VID, HOST)
    from tracea.emitters.cuda import cores

    assert cores.for_schedule(op, hero) is cores.for_variant(cuda.resolve(VID), op)


@pytest.mark.parametrize("bad", [{"bq": 96}, {"bk": 16}, {"stages": 4}, {"order": "random"}, {"bq": True},
                                 {"warps": 4}, {"backend": "cpu"}, {"warp_rows": 64}])
def test_bad_schedules_are_refused(bad):
    with pytest.raises(BadInputError):
        cuda.schedule_from_json({**AttentionMmaSchedule().to_json(), **bad})


def test_schedules_that_do_not_fit_the_op_are_refused():
    d256 = Attention(1, 2, 100, 256, dtype="bf16")
    with pytest.raises(BadInputError, match="256"):
        compile_kernel(d256, VID, AttentionMmaSchedule(bq=128, bk=64), HOST, "sm_90a")
    d128 = Attention(1, 2, 100, 128, dtype="bf16")
    with pytest.raises(BadInputError, match="bk"):
        compile_kernel(d128, VID, AttentionMmaSchedule(bk=128), HOST, "sm_90a")
    with pytest.raises(BadInputError, match="bk"):
        compile_kernel(d128, VID, AttentionMmaSchedule(bk=64, warp_rows=32), HOST, "sm_90a")
    with pytest.raises(BadInputError, match="warp_rows"):
        compile_kernel(d128, VID, AttentionMmaSchedule(bq=64, bk=32, warp_rows=32), HOST, "sm_90a")
    with pytest.raises(UnsupportedError, match="bf16 or fp16"):
        compile_kernel(Attention(1, 2, 100, 64), VID, AttentionMmaSchedule(), HOST, "sm_90a")
    with pytest.raises(UnsupportedError, match="head_dim"):  # a multiple of 8 below the kernels' 32
        compile_kernel(Attention(1, 2, 100, 24, dtype="bf16"), VID, AttentionMmaSchedule(), HOST, "sm_90a")
    with pytest.raises(BadInputError, match="bk"):
        compile_kernel(Attention(1, 2, 100, 160, dtype="bf16"), VID, AttentionMmaSchedule(bk=128), HOST, "sm_90a")
    with pytest.raises(BadInputError, match="warp_rows"):
        compile_kernel(Attention(1, 2, 100, 160, dtype="bf16"), VID, AttentionMmaSchedule(bk=32, warp_rows=32),
                       HOST, "sm_90a")
    with pytest.raises(UnsupportedError):
        compile_kernel(Attention(1, 2, 100, 64, dtype="bf16"), VID, AttentionMmaSchedule(), HOST, "sm_75")
    assert all(s.bk <= 64 for s in search_space(Attention(1, 2, 100, 128, dtype="bf16"), AttentionMmaSchedule(), None)
               if s.bk != 128)


def test_launch_order_rides_after_the_csr_pointers():
    op = Attention(1, 1, 1000, 64, dtype="bf16", causal=True)
    plan = tile_plan(op, 128, 64)
    ptr, idx, computed = plan_arrays(op, 128, 64)
    assert list(ptr[:plan.q_tiles + 1]) == list(plan.ptr) and list(ptr[plan.q_tiles + 1:]) == list(plan.order)
    assert list(idx) == list(plan.idx) and computed == plan.computed
    nat = plan_arrays(op, 128, 64, "natural")[0]
    assert list(nat[plan.q_tiles + 1:]) == list(range(plan.q_tiles))
    empty = Attention(1, 1, 50, 64, seq_k=10, dtype="bf16", causal=True, window=(0, 0))
    assert plan_arrays(empty, 64, 32)[1].size >= 1  # a device buffer even when nothing is visited


# ---- a NumPy model of the kernel's fragment addressing (attention_kernel.py, lane by lane) -------------

def swz(r, ch, hd):
    if hd % 64:  # rows padded by 16 bytes
        return r * (hd * 2 + 16) + (ch << 4)
    return r * hd * 2 + ((ch ^ (r & 7)) << 4)


def store_tile(x: np.ndarray) -> np.ndarray:
    """x (rows, hd) as the kernel's swizzled (or padded) shared tile: uint16 words by byte offset / 2."""
    rows, hd = x.shape
    mem = np.zeros(rows * (hd + 8), np.float64)
    for r in range(rows):
        for ch in range(hd // 8):
            o = swz(r, ch, hd) // 2
            mem[o:o + 8] = x[r, ch * 8:ch * 8 + 8]
    return mem


def ldm4(mem, addr, trans=False):
    """ldmatrix.x4: lane l gives row l % 8 of matrix l // 8; returns regs[4][32][2]."""
    out = np.zeros((4, 32, 2))
    for i in range(4):
        rows = [addr[8 * i + j] // 2 for j in range(8)]
        for lane in range(32):
            g, q = lane >> 2, lane & 3
            if trans:
                out[i, lane] = [mem[rows[2 * q] + g], mem[rows[2 * q + 1] + g]]
            else:
                out[i, lane] = mem[rows[g] + 2 * q:rows[g] + 2 * q + 2]
    return out


def mma(a, b0, b1):
    """m16n8k16 on fragments: a regs[4][32][2], b regs (k 0-7, k 8-15)[32][2] -> C (16, 8)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        for reg, (r, c) in enumerate(((g, 2 * q), (g + 8, 2 * q), (g, 2 * q + 8), (g + 8, 2 * q + 8))):
            A[r, c:c + 2] = a[reg][lane]
        B[2 * q:2 * q + 2, g] = b0[lane]
        B[2 * q + 8:2 * q + 10, g] = b1[lane]
    return A @ B


def c_frag(c):
    """C (16, 8) as each lane's (c0, c1) and (c2, c3)."""
    lanes = np.arange(32)
    g, q = lanes >> 2, lanes & 3
    return np.stack([c[g, 2 * q], c[g, 2 * q + 1]], 1), np.stack([c[g + 8, 2 * q], c[g + 8, 2 * q + 1]], 1)


@pytest.mark.parametrize("hd", (64, 128, 32, 80, 96, 160))
def test_fragment_model_reproduces_qk_and_pv(hd):
    rng = np.random.default_rng(3)
    bk, wrow = 32, 16  # the second warp of the block
    q, k, v = rng.integers(-3, 4, (32, hd)), rng.integers(-3, 4, (bk, hd)), rng.integers(-3, 4, (bk, hd))
    sq, sk, sv = store_tile(q), store_tile(k), store_tile(v)
    lane = np.arange(32)
    s = np.zeros((16, bk))
    for kk in range(hd // 16):
        a = ldm4(sq, [swz(wrow + (x & 7) + ((x >> 3) & 1) * 8, kk * 2 + (x >> 4), hd) for x in lane])
        for j in range(bk // 16):
            bb = ldm4(sk, [swz(j * 16 + (x & 7) + (x >> 4) * 8, kk * 2 + ((x >> 3) & 1), hd) for x in lane])
            s[:, 16 * j:16 * j + 8] += mma(a, bb[0], bb[1])
            s[:, 16 * j + 8:16 * j + 16] += mma(a, bb[2], bb[3])
    assert np.array_equal(s, q[wrow:wrow + 16] @ k.T)
    p = rng.integers(-2, 3, (16, bk)).astype(float)  # P's C fragments, packed as the kernel packs them
    frags = [c_frag(p[:, 8 * j:8 * j + 8]) for j in range(bk // 8)]
    o = np.zeros((16, hd))
    for kk in range(bk // 16):
        pa = [frags[2 * kk][0], frags[2 * kk][1], frags[2 * kk + 1][0], frags[2 * kk + 1][1]]
        for t in range(hd // 16):
            bb = ldm4(sv, [swz(kk * 16 + (x & 7) + ((x >> 3) & 1) * 8, t * 2 + (x >> 4), hd) for x in lane], True)
            o[:, 16 * t:16 * t + 8] += mma(pa, bb[0], bb[1])
            o[:, 16 * t + 8:16 * t + 16] += mma(pa, bb[2], bb[3])
    assert np.array_equal(o, p @ v)


def test_swizzle_spreads_an_ldmatrix_phase_over_all_banks():
    for hd in range(32, 257, 16):  # the XOR swizzle at multiples of 64, padded rows at the others
        for ch in range(hd // 8):
            banks = {(swz(r, ch, hd) // 4) % 32 // 4 for r in range(8)}  # 16-byte bank groups of 8 rows
            assert len(banks) == 8


# ---- a NumPy model of the kernel's walk: the plan's tiles, the element test on partial tiles only, the
# online softmax with the kernel's -inf rules; O and lse against the float64 reference -------------------

def model_forward(op: Attention, inputs: dict, bq: int, bk: int) -> tuple[np.ndarray, np.ndarray]:
    from tracea.emitters.cuda.attention_plan import LOG2E, mask_scalars
    from tracea.kernels.dtypes import to_float64

    sc = mask_scalars(op)
    plan = tile_plan(op, bq, bk)
    q, k, v = (to_float64(inputs[n], op.dtype) for n in ("q", "k", "v"))
    out, lse = np.zeros(op.output_shape()), np.zeros(op.lse_shape())
    group = op.heads // op.kv_heads
    bm = op.block_mask_array()
    for b in range(op.batch):
        for h in range(op.heads):
            for t in plan.order:
                rows = np.arange(t * bq, t * bq + bq)
                qt = q[b, h, np.minimum(rows, op.seq_q - 1)] * (rows < op.seq_q)[:, None]  # zero-filled rows
                m, rs, o = np.full(bq, -np.inf), np.zeros(bq), np.zeros((bq, op.head_dim))
                for kt, partial in plan.entries(t):
                    cols = np.arange(kt * bk, kt * bk + bk)
                    real = cols < op.seq_k
                    kk = k[b, h // group, np.minimum(cols, op.seq_k - 1)] * real[:, None]
                    vv = v[b, h // group, np.minimum(cols, op.seq_k - 1)] * real[:, None]
                    s = qt @ kk.T
                    if partial:
                        i = np.minimum(rows, op.seq_q - 1)[:, None]
                        d = cols[None, :] - i - sc["diag"]
                        keep = real[None, :] & (d >= -sc["win_left"]) & (d <= sc["win_right"])
                        if bm is not None:
                            keep &= bm[i // sc["bm_bq"], np.minimum(cols, op.seq_k - 1)[None, :] // sc["bm_bk"]]
                        s = np.where(keep, s, -np.inf)
                    x = np.maximum(m, s.max(axis=1))
                    ms = np.where(np.isneginf(x), 0.0, x * sc["scale_log2"])
                    alpha = np.exp2(m * sc["scale_log2"] - ms)
                    p = np.exp2(s * sc["scale_log2"] - ms[:, None])
                    m, rs, o = x, rs * alpha + p.sum(axis=1), o * alpha[:, None] + p @ vv
                live = rows < op.seq_q
                n = int(live.sum())
                out[b, h, rows[live]] = (o / np.where(rs > 0, rs, 1)[:, None])[:n]
                lse[b, h, rows[live]] = np.where(rs > 0, (m * sc["scale_log2"] + np.log2(np.where(rs > 0, rs, 1)))
                                                 / LOG2E, -np.inf)[:n]
    return out, lse


@pytest.mark.parametrize("op", [
    Attention(1, 2, 17, 64, dtype="bf16"),
    Attention(1, 2, 200, 64, seq_k=300, dtype="bf16", causal=True),
    Attention(1, 2, 300, 64, seq_k=100, dtype="bf16", causal=True),  # rows keeping nothing
    Attention(1, 2, 150, 64, seq_k=230, dtype="bf16", window=(20, 7)),
    Attention(1, 4, 130, 64, kv_heads=2, dtype="fp16", causal=True, window=(40, 0)),
    Attention(1, 2, 300, 64, dtype="bf16", causal=True, block_size=(48, 80),
              block_mask=np.random.default_rng(0).random((7, 4)) < 0.4),
], ids=lambda op: op.signature[:60])
def test_walk_model_matches_the_reference(op):
    from tracea.kernels.ops.attention import lse_error

    inputs = op.random_inputs(np.random.default_rng(5))
    ref, ref_lse = op.reference_with_lse(inputs)
    for bq, bk in ((64, 32), (128, 64)):
        out, lse = model_forward(op, inputs, bq, bk)
        assert np.abs(out - ref).max() < 1e-9 and lse_error(lse, ref_lse) < 1e-9, (bq, bk)


@pytest.mark.parametrize("hd", (64, 128, 256, 32, 48, 80, 96, 160, 240))
def test_bank_simulator_finds_no_conflict_in_the_kernels_ldmatrix(hd):
    from tracea.emitters.bank_sim import simulate_accesses
    from tracea.emitters.cuda.attention import bank_accesses

    for s in (AttentionMmaSchedule(bq=64, bk=32), AttentionMmaSchedule(bk=64, stages=3)):
        accesses = bank_accesses(s, hd)
        if hd % 64:  # padded rows: the epilogue's 16-byte reads of O (once a block) cross a pad, 2-way at most
            out = [a for a in accesses if a.name.startswith("O out")]
            assert simulate_accesses(out).totals()["max_conflict_degree"] <= 2
            accesses = [a for a in accesses if a not in out]
        totals = simulate_accesses(accesses).totals()
        assert totals["instructions"] > 0 and totals["conflicts"] == 0, (hd, s, totals)
    if hd % 64:  # padded rows: the same reads on unpadded rows conflict 2- to 4-way
        pitch = 2 * hd + 16

        def unpad(x: int) -> int:
            return x // pitch * hd * 2 + x % pitch

        plain = [a.__class__(a.op, a.bytes_per_lane, tuple(map(unpad, a.addresses)))
                 for a in bank_accesses(AttentionMmaSchedule(), hd) if a.op.startswith("ldmatrix")]
        assert simulate_accesses(plain).totals()["max_conflict_degree"] >= 2
        return

    # the same reads without the swizzle conflict 8-way (every row's chunk in one bank group)
    def unswizzle(x: int) -> int:
        r = x // (hd * 2)
        return r * hd * 2 + (((x % (hd * 2)) // 16) ^ (r % 8)) * 16 + x % 16

    plain = [a.__class__(a.op, a.bytes_per_lane, tuple(map(unswizzle, a.addresses)))
             for a in bank_accesses(AttentionMmaSchedule(), hd) if a.op.startswith("ldmatrix")]
    assert simulate_accesses(plain).totals()["max_conflict_degree"] == 8
