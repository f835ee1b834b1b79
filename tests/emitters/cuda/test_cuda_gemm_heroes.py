"""The Hopper GEMM's hero for 33-512 rows (``gemm_heroes.one_wave``): which tiles it takes, where it leaves the
heuristic alone, the int8 tiles it does not reach, the tuner's space, and NVRTC compiles of its forms for sm_90a
without spills (no GPU needed). Its GPU runs: tests/emitters/cuda/test_cuda_gpu.py, the sanitizer cases
``wgmma-one-wave-*`` and benchmarks/gpu/mid_m_gemm_checks.sh."""

from __future__ import annotations

import dataclasses

import pytest
from test_cuda_wgmma import nvrtc, nvrtc_compile, spills  # noqa: F401 - the fixture is used by name

from tracea.emitters.cuda import hopper as W
from tracea.emitters.cuda.hopper import gemm_heroes as G
from tracea.emitters.cuda.hopper import splitk
from tracea.emitters.cuda.hopper.schedule import tile_count
from tracea.kernels import Conv2d, Gemm


@pytest.mark.parametrize("m,n,k,want", [
    (128, 4096, 4096, (64, 64, 12, 1)),     # 128 tiles of 132
    (128, 11008, 4096, (64, 192, 6, 1)),    # 116: 64 x 64 (344) and 64 x 128 (172) take more than a wave
    (128, 14336, 4096, (64, 256, 5, 1)),    # 112, level with 128 x 128's 112: the earlier form
    (128, 4096, 14336, (64, 64, 12, 1)),
    (64, 4096, 4096, (64, 64, 12, 1)),      # 64 tiles: 48 % of the SMs
    (64, 11008, 4096, (64, 128, 8, 1)),
    (256, 11008, 4096, (128, 192, 4, 2)),   # only 128 x 192 (116) fits a wave
    (320, 4096, 4096, (64, 192, 6, 1)),
    (512, 4096, 4096, (64, 256, 5, 1)),
    (192, 12288, 4096, (128, 192, 4, 2)),
    (100, 2000, 1300, (64, 64, 12, 1)),     # the GPU tests' cases (test_cuda_gpu.py)
    (300, 4000, 1200, (64, 192, 6, 1)),
])
def test_one_wave_takes_the_fullest_form_that_fits(m, n, k, want):
    op = Gemm(m, n, k, "bf16")
    s = G.gemm_hero_schedule(op)
    assert (s.bm, s.bn, s.stages, s.consumers) == want
    assert s.split == 1 and s.l2_hint == "first" and s.store == "tma"
    tiles = tile_count(s, m, n)
    assert G.LEAST_FILL * 132 <= tiles <= 132
    assert not any(tiles < tile_count(f, m, n) <= 132 for f in G.ONE_WAVE_FORMS if f.bm == 64 or m >= f.bm)
    s.validate(op)


@pytest.mark.parametrize("op", [
    Gemm(2048, 4096, 4096, "bf16"),         # past 512 rows: compute-bound, 128 x 256 tiles
    Gemm(513, 4096, 4096, "bf16"),
    Gemm(32, 4096, 4096, "bf16"),           # the TMA gemv's rows (this hero only where it is refused)
    Gemm(128, 4096, 1024, "bf16"),          # 16 k steps: short_k_schedule's tiles
    Gemm(128, 4096, 1088, "bf16"),          # 17 k steps: with_split's threshold
    Gemm(48, 3072, 4096, "fp16"),           # 48 tiles, 36 % of the SMs
    Gemm(512, 512, 16384, "bf16"),          # N = M: 64 one-wave tiles ran 0.62x, split-K 0.95x
    Gemm(256, 1000, 8192, "fp16"),          # N < 4 M: the activations are no small operand
])
def test_the_heuristic_stays_outside_the_rule(op):
    assert G.one_wave(op, 132) is None and G.few_tiles(op, 132) is None and G.many_waves(op, 132) is None
    assert G.gemm_hero_schedule(op) == W.hero_schedule(op)


@pytest.mark.parametrize("m, n, k, want", [
    (320, 12288, 4096, (64, 256)),     # 128 x 256: three tile rows, a second wave of 12 tiles (0.64x -> 1.20x)
    (160, 13824, 5120, (64, 192)),     # 0.80x -> 0.91x
    (100, 20000, 4096, (128, 192)),    # 105 128-row tiles over 100 rows: one wave (0.85x -> 1.09x)
    (176, 22016, 4096, (64, 256)),     # held out: 0.58x -> 0.95x
    (480, 11008, 4096, (128, 192)),    # held out: 0.64x -> 0.83x
    (224, 18944, 3584, (64, 192)),     # held out: 0.68x -> 1.08x
    (64, 65536, 4096, (64, 256)),      # a wide vocabulary at 64 rows: 0.90x -> 0.94x
    (128, 32000, 4096, (128, 256)),    # ties: the two-consumer 128 x 256 tiles stay (1.01x)
    (448, 16384, 4096, (128, 256)),    # 64 x 192 within WAVE_MARGIN: stays (0.98x)
    (128, 128256, 4096, (128, 256)),
])
def test_many_waves_takes_the_cheapest_whole_waves(m, n, k, want):
    op = Gemm(m, n, k, "bf16")
    s = G.gemm_hero_schedule(op)
    assert G.one_wave(op, 132) is None and G.many_waves(op, 132) == s and (s.bm, s.bn) == want
    cost = {f: G.wave_cost(f, m, n, 132) for f in G.WAVE_FORMS}
    assert cost[s] == min(cost.values()) or (s == G.HERO and min(cost.values()) > G.WAVE_MARGIN * cost[s])
    s.validate(op)


def test_many_waves_leaves_one_wave_shapes_and_short_k():
    assert G.many_waves(Gemm(128, 4096, 4096, "bf16"), 132) is None       # one_wave's
    assert G.many_waves(Gemm(288, 8192, 8192, "bf16"), 132) is None       # one_wave's: 129 128 x 192 tiles
    assert G.many_waves(Gemm(64, 1024, 4096, "bf16"), 132) is None        # few tiles: split-K's
    assert G.many_waves(Gemm(320, 12288, 1024, "bf16"), 132) is None      # 16 k steps: short_k_schedule's
    assert G.many_waves(Gemm(600, 12288, 4096, "bf16"), 132) is None      # past 512 rows
    assert G.many_waves(Gemm(320, 1200, 4096, "bf16"), 132) is None       # N < 4 M


@pytest.mark.parametrize("m, n, k", [
    (256, 256, 16384), (128, 128, 32768), (256, 512, 16384), (64, 1024, 4096), (200, 136, 30000),
    (96, 384, 16384), (32, 2048, 8192),
])
def test_few_tiles_splits_small_outputs_over_long_k(m, n, k):
    """At most a quarter wave of 64 x 64 tiles over 18+ k steps: those tiles, each cut into 4 or more slices summed
    by the spread fix-up (the split chosen at launch from the SM count)."""
    op = Gemm(m, n, k, "bf16")
    s = G.gemm_hero_schedule(op)
    assert s == G.FEW_TILES and (s.split, s.split_fix, s.bm, s.bn) == (0, "spread", 64, 64)
    plan = splitk.plan(s, m, n, -(-k // 64), 132)
    assert plan.splits >= 4 and plan.units <= 132 and plan.spread
    s.validate(op)


@pytest.mark.parametrize("op", [
    Gemm(384, 384, 12288, "bf16"),          # 36 tiles: over a quarter wave, the heuristic's split (level there)
    Gemm(512, 512, 16384, "bf16"),          # 64 tiles: 64 x 128 split 4 ways ran 27.2 us, 64 x 64 30.2
    Gemm(256, 256, 1088, "bf16"),           # 17 k steps: too short to split
    Gemm(256, 256, 1984, "bf16"),           # 31 k steps: under four slices of 8 (not measured)
    Gemm(128, 4096, 4096, "bf16"),          # one_wave's
])
def test_few_tiles_leaves_the_rest(op):
    s = G.gemm_hero_schedule(op)
    assert s != G.FEW_TILES
    assert G.few_tiles(op, 132) is None or G.one_wave(op, 132) is not None


def test_few_tiles_follows_the_sm_count():
    op = Gemm(256, 512, 16384, "bf16")  # 32 tiles of 64 x 64
    assert G.few_tiles(op, 132) == G.FEW_TILES and G.few_tiles(op, 114) is None  # an H100 PCIe: over a quarter


def test_the_rule_follows_the_sm_count():
    op = Gemm(128, 4096, 4096, "bf16")
    assert G.gemm_hero_schedule(op, 114).bn == 128  # an H100 PCIe: 128 64 x 64 tiles no longer fit one wave
    for sms in (66, 78, 114, 132, 144):
        s = G.one_wave(op, sms)
        assert s is None or G.LEAST_FILL * sms <= tile_count(s, op.m, op.n) <= sms


def test_every_form_fits_sm90():
    for s in G.ONE_WAVE_FORMS:
        s.validate(Gemm(128, 4096, 4096, "fp16"), W.SMEM_OPTIN_SM90)
        assert s.smem_bytes <= W.SMEM_OPTIN_SM90
    assert len(set(G.ONE_WAVE_FORMS)) == len(G.ONE_WAVE_FORMS)


def test_int8_and_convs_keep_their_heroes():
    # the int8 tiles (scaled_gemm, over the byte view) and the conv heroes build on schedule.hero_schedule, on which
    # they were measured: at 128 x 4096 x 4096 the int8 hero keeps 64 x 128 split-K where one_wave would take 64 x 64
    from tracea.emitters.cuda.hopper import scaled_gemm as sg
    from tracea.kernels import ScaledGemm

    op = ScaledGemm(128, 4096, 4096, "int8")
    old = W.hero_schedule(sg.byte_view(op))
    hero = sg.hero_schedule(op)
    assert (hero.bm, hero.bn, hero.stages) == (old.bm, old.bn, old.stages)
    assert G.one_wave(sg.byte_view(op), 132) not in (None, old)
    assert G.one_wave(Conv2d(2, 2048, 7, 7, 2048, 1, 1, layout="nhwc", dtype="fp16"), 132) is None


@pytest.mark.parametrize("m,n,k,want", [
    (50176, 440, 440, "wide"),    # 784 128 x 256 tiles: 6 turns, against 12 of 1568 128 x 128 ones
    (4096, 4096, 1000, "wide"),   # K = 1000: A's and B's 2000-byte rows off lines
    (8192, 11000, 4096, "wide"),  # N = 11000: C's rows off lines
    (16384, 360, 360, "pair"),    # 256 128 x 256 tiles: 2 turns (3.6 counted), 384 128 x 128 ones 3
    (100352, 96, 864, "pair"),    # 96 columns: a 256-wide tile spends 160 on nothing
    (2048, 2056, 2048, "pair"),
])
def test_rows_off_lines_take_pairs_sharing_b(m, n, k, want):
    op = Gemm(m, n, k, "bf16", layout_b="col")
    hero = G.gemm_hero_schedule(op)
    assert hero == {"wide": G.OFF_LINE_WIDE, "pair": G.OFF_LINE_PAIR}[want], hero.name
    hero.validate(op)
    assert G.off_line(op, W.hero_schedule(op), 132) == hero


@pytest.mark.parametrize("op", [
    Gemm(50176, 440, 440, "bf16"),                 # row-major B: not measured in pairs
    Gemm(50176, 440, 440, "fp32", layout_b="col"),  # not 16-bit
    Gemm(4096, 4096, 4096, "bf16", layout_b="col"),  # every row on a line
    Gemm(4096, 440, 4096, "bf16", layout_b="col"),  # 64 x 128 split tiles: not a 128-row unsplit pick
    Gemm(128, 11008, 4104, "bf16", layout_b="col"),  # one_wave's
])
def test_off_line_leaves_the_rest(op):
    assert G.gemm_hero_schedule(op) not in (G.OFF_LINE_WIDE, G.OFF_LINE_PAIR)
    assert G.off_line(op, W.hero_schedule(op), 132) == W.hero_schedule(op)


def test_off_line_pairs_count_blocks_not_tiles():
    """A pair's blocks take two neighbouring tile rows: one row of tiles leaves every second block idle (no pairs), and
    an odd count leaves the last pairs' second blocks idle (counted as blocks)."""
    for m in (100, 128):
        assert G.off_line_pairs(m, 40000, 7, 132) is None and G.off_line_pairs(m, 20000, 16, 132) is None
        assert G.gemm_hero_schedule(Gemm(m, 40000, 440, "bf16", layout_b="col")).cluster == 1
    # 49 tile rows (n32 c1000 14x14): 25 pairs of rows; 128 x 256 in 200 blocks (2 turns), 128 x 128 in 400 (4)
    assert G.off_line_pairs(6272, 1000, 16, 132) == G.OFF_LINE_WIDE


def test_off_line_pairs_need_waves_or_k():
    assert G.off_line_pairs(3136, 440, 7, 132) is None  # 100 tiles of 128 x 128: under two waves
    assert G.off_line_pairs(12544, 480, 2, 132) is None  # two k steps, 196 wide tiles
    assert G.off_line_pairs(50176, 480, 2, 132) == G.OFF_LINE_WIDE  # two k steps, 784 wide tiles
    assert G.off_line_pairs(2048, 2048, 40, 66) == G.OFF_LINE_WIDE  # 66 SMs: 128 wide tiles in 2 turns, 256 in 4
    assert G.largest_smem() >= max(G.OFF_LINE_WIDE.smem_bytes, G.OFF_LINE_PAIR.smem_bytes)


def test_the_tuner_space_starts_at_the_hero_and_holds_every_form():
    op = Gemm(128, 11008, 4096, "bf16", layout_b="col")
    space = W.search_space(op)
    assert space[0] == G.gemm_hero_schedule(op)
    assert set(G.ONE_WAVE_FORMS) <= set(space)
    assert len(set(space)) == len(space)
    # split-K over a one-wave form, for the tuner, at most 5 stages deep with evict-first loads (schedule.streamed)
    assert dataclasses.replace(G.ONE_WAVE_FORMS[2], split=0, stages=5) in space
    assert not any(s.split != 1 and s.l2_hint == "first" and s.stages > 5 for s in space)


def test_the_forms_compile_for_sm90a_without_spills(nvrtc):  # noqa: F811 - the fixture
    op = Gemm(200, 4000, 4096, "bf16", layout_b="col", epilogue=("bias",))
    for s in G.ONE_WAVE_FORMS:
        log = nvrtc_compile(W.render(op, s), s.name)
        assert spills(log) == (0, 0, 0), f"{s.name}: {log}"
