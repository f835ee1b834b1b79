"""The Hopper implicit-GEMM conv (cuda-wgmma.conv2d): its schedule value, the gather's shared-memory
addresses against the TMA 128B pattern, NVRTC compiles for sm_90a (hero spill-free, a sample of the
space), planning on the recorded H100/H200 snapshots (and nowhere else), and the emitter's entry
points without a GPU. The GPU run itself is benchmarks/gpu/wgmma_conv_run.py (records:
docs/device-runs/h200-cuda-kernels-and-tuner/wgmma_conv/).
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters.cuda.hopper import conv as WC
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.emitters.cuda.hopper.schedule import BK, SWIZZLE
from tracea.emitters.cuda.hopper.space import conv_search_space
from tracea.emitters.layout import TileLayout
from tracea.kernels import Conv2d, Gemm

ROOT = Path(__file__).resolve().parents[3]


def conv(n=1, c=64, h=56, w=56, k=128, r=3, s=3, layout="nhwc", dtype="fp16", **kw) -> Conv2d:
    return Conv2d(n=n, c=c, h=h, w=w, k=k, r=r, s=s, padding=(1, 1), layout=layout, dtype=dtype, **kw)


class _NoGpu:
    nvidia = None


# ------------------------------------------------------------------------------------------ schedule


def test_schedule_validation_names_the_field():
    with pytest.raises(BadInputError, match="cluster"):
        WgmmaConvSchedule(cluster=2).validate(conv())
    with pytest.raises(BadInputError, match="stages"):
        WgmmaConvSchedule(bm=128, bn=128, stages=2).validate(conv())
    with pytest.raises(BadInputError, match="publish"):
        WgmmaConvSchedule(publish="eventually").validate(conv())
    with pytest.raises(BadInputError, match="dtype"):
        conv_hero_schedule().validate(conv(dtype="fp32"))
    with pytest.raises(BadInputError, match="conv2d"):
        conv_hero_schedule().validate(Gemm(64, 64, 64, "fp16"))
    with pytest.raises(BadInputError, match="accumulators"):  # 128 x 256 ping-pong: 256 per thread
        WgmmaConvSchedule(bm=128, bn=256, pingpong=True).validate(conv())


def test_schedule_json_round_trip_and_space():
    op = conv(k=256)
    space = conv_search_space(op)
    assert space[0] == conv_hero_schedule(op) and len(space) > 50
    assert {s.publish for s in space} == {"wait", "noinc"} and any(s.pingpong for s in space)
    assert all(s.cluster == 1 and s.stages >= 3 for s in space)
    for s in space[:: max(1, len(space) // 9)]:
        assert WgmmaConvSchedule.from_json(s.to_json()) == s
        assert s.to_json()["kernel"] == "conv2d" and s.name.startswith("conv_wgmma_")
    with pytest.raises(BadInputError):
        WgmmaConvSchedule.from_json({**space[0].to_json(), "kernel": "gemm"})


def test_heroes_follow_k():
    # batch 32: tiles enough to fill the SMs (fewer take split-K: tests/emitters/cuda/test_cuda_splitk.py)
    # convs TMA's im2col mode can walk take it: ping-pong 128-row tiles as wide as K allows up to 128
    for k, bn in ((64, 64), (128, 128)):
        h = conv_hero_schedule(conv(n=32, k=k))
        assert (h.path, h.bm, h.bn, h.pingpong, h.store) == ("im2col", 128, bn, True, "tma"), k
    # 784 tiles of 128 x 256 (K = 256 at 56x56): the wide tile; at 14x14 (49 of them) ping-pong 128 x 128
    h = conv_hero_schedule(conv(n=32, k=256))
    assert (h.path, h.bm, h.bn, h.pingpong) == ("im2col", 128, 256, False)
    h = conv_hero_schedule(conv(n=32, k=256, h=14, w=14))
    assert (h.path, h.bm, h.bn, h.pingpong) == ("im2col", 128, 128, True)
    # the gather keeps the rest (a stride of 9 is past TMA's traversal strides)
    assert conv_hero_schedule(conv(n=32, k=128, stride=9)).pingpong
    big = conv_hero_schedule(conv(n=32, k=256, stride=9, h=512, w=512))
    assert (big.path, big.bm, big.bn, big.publish, big.store) == ("gather", 128, 256, "noinc", "tma")


def test_filter_counts_that_192_wide_tiles_cover_take_them():
    """``columns_192``: 3x3 convs whose filters 192-wide tiles cover with no more columns than 128-wide ones, where
    64 x 192 tiles fill half of 132 SMs or more; 128 x 192 on two consumers where it takes fewer SM turns (an H200,
    docs/device-runs/h200-conv1x1-tune/, calls 9-11). Filter counts 128-wide tiles cover exactly (256, 512) and
    small ones (64, 128) keep the rules before; 128 x 256 tiles only where they waste no columns (320-640 filters
    ran 0.56-0.74x on them)."""
    from tracea.emitters.cuda.hopper.conv_heroes import COLUMNS_192

    wide, narrow = COLUMNS_192
    picks = {(8, 192, 28): narrow, (16, 192, 28): wide, (16, 384, 14): narrow, (32, 320, 14): wide,
             (32, 768, 7): narrow, (64, 768, 7): wide, (32, 320, 28): wide, (64, 576, 14): wide}
    for (n, c, h), want in picks.items():
        op = conv(n=n, c=c, h=h, w=h, k=c)
        assert conv_hero_schedule(op) == want, (n, c, h)
        want.validate(op)
    for n, c, h in ((8, 320, 14), (8, 768, 7), (16, 768, 7)):  # 64 x 192 tiles under half the SMs: the rules before
        assert conv_hero_schedule(conv(n=n, c=c, h=h, w=h, k=c)).bn != 192
    for k in (64, 128, 256, 512, 640):  # covered as well or better by 128-wide tiles
        assert conv_hero_schedule(conv(n=32, c=k, h=14, w=14, k=k)).bn != 192, k
    assert conv_hero_schedule(conv(n=32, c=256, h=56, w=56, k=256)).bn == 256  # 128 x 256 where it wastes nothing
    assert conv_hero_schedule(conv(n=64, c=640, h=14, w=14, k=640)).bn == 128  # 768 columns of 256 for 640: not
    # on a GPU of fewer SMs fewer tiles fill it
    assert conv_hero_schedule(conv(n=8, c=320, h=14, w=14, k=320), sm_count=66) == narrow
    # measured on 3x3 filters only: strided 1x1 and 7x7 convs of 192 filters keep the rules before
    strided = Conv2d(32, 384, 28, 28, 192, 1, 1, stride=2, layout="nhwc", dtype="fp16")
    seven = Conv2d(8, 64, 56, 56, 192, 7, 7, padding=3, layout="nhwc", dtype="fp16")
    assert conv_hero_schedule(strided).bn != 192 and conv_hero_schedule(seven).bn != 192


def test_few_pixels_take_64_by_64_im2col_tiles_split_from_32_k_steps():
    """ResNet-50's batch-1 convs that the im2col path walks (few_pixels_im2col): 64 x 64 tiles where 128-row tiles
    fill under half of 132 SMs and 64 x 64 ones fit in one wave; split-K (planned at launch) from 32 k steps."""
    cases = [  # (n, c, h, k, filter, stride, split): 9 x 1-2 k steps unsplit, 9 x 4-8 split over at most 33 tiles,
        # 1x1 strided 4-16 unsplit; 36 k steps over 52-100 tiles unsplit (batch 4 and 8)
        (1, 64, 56, 64, 3, 1, 1), (1, 128, 56, 128, 3, 2, 1), (1, 128, 28, 128, 3, 1, 1), (1, 256, 28, 256, 3, 2, 0),
        (1, 256, 14, 256, 3, 1, 0), (1, 512, 7, 512, 3, 1, 0), (1, 256, 56, 512, 1, 2, 1), (1, 1024, 14, 2048, 1, 2, 1),
        (4, 256, 14, 256, 3, 1, 1), (4, 512, 7, 512, 3, 1, 0), (8, 256, 28, 256, 3, 2, 1), (4, 1024, 14, 2048, 1, 2, 1)]
    for n, c, h, k, f, stride, split in cases:
        op = Conv2d(n=n, c=c, h=h, w=h, k=k, r=f, s=f, stride=stride, padding=f // 2, layout="nhwc", dtype="fp16")
        got = conv_hero_schedule(op)
        assert (got.path, got.bm, got.bn, got.consumers, got.split) == ("im2col", 64, 64, 1, split), (n, c, h, k, f)
        got.validate(op)
    # 72 k steps over 56 tiles of 64 x 64 (batch 8, 512 channels at 7x7): 64 x 128 tiles split, as before
    got = conv_hero_schedule(conv(n=8, c=512, h=7, w=7, k=512))
    assert (got.bm, got.bn, got.split) == (64, 128, 0)
    # plenty of tiles (batch 32), or 64 x 64 tiles past one wave (batch 8's 64-channel 3x3): as before
    assert conv_hero_schedule(conv(n=32, c=512, h=7, w=7, k=512)).bn == 128
    assert (conv_hero_schedule(conv(n=8, c=64, h=56, w=56, k=64)).bm, conv_hero_schedule(conv(n=8, c=64, h=56, w=56,
                                                                                                k=64)).pingpong) == (128, True)
    # on fewer SMs the same conv can leave the rule (4 tiles of 128 x 128 fill half of 8 SMs)
    assert conv_hero_schedule(conv(n=1, c=512, h=7, w=7, k=512), sm_count=32).bn == 64
    assert conv_hero_schedule(conv(n=1, c=512, h=7, w=7, k=512), sm_count=8).bn == 128


def test_lag_leaves_the_consumers_two_stages():
    """A producer thread publishes a stage ``lag`` steps late; the consumers hold two stages (one in the
    wgmma, one in flight), so lag <= stages - 2 or the ring deadlocks."""
    for stages in range(3, 9):
        s = WgmmaConvSchedule(bm=128, bn=128, stages=stages)
        assert 1 <= s.lag <= stages - 2


# ------------------------------------------------------------------------------------------ gather


def _eval_offset(expr: str, line: int, col: int) -> int:
    c_expr = re.sub(r"(\d+)u", r"\1", expr)  # C unsigned literals -> Python ints
    return eval(c_expr, {}, {"line": line, "chunk": col // 8})  # noqa: S307 - our own C expression


def test_gather_addresses_are_the_tma_128b_pattern():
    """The producer writes 16-byte chunk ``chunk`` of line ``line`` where TMA's 128B swizzle would: chunk
    index XOR (line mod 8), lines 128 bytes apart; every byte of the stage's A tile written once."""
    for bm in (64, 128, 256):
        lay = TileLayout(bm, BK, 2, "row", swizzle=SWIZZLE)
        expr = lay.c_offset("line", "chunk * 8")
        seen = set()
        for line in range(bm):
            for chunk in range(8):
                off = _eval_offset(expr, line, chunk * 8)
                assert off == line * 128 + ((chunk ^ (line % 8)) * 16)
                seen.add(off)
        assert seen == set(range(0, bm * 128, 16))
        src = WC.render(conv(), WgmmaConvSchedule(bm=bm, bn=128, stages=4, consumers=1 if bm == 64 else 2))
        assert expr in src


def test_rendered_source_has_the_pieces():
    op = conv(bias=True)
    wait = WC.render(op, WgmmaConvSchedule(bm=128, bn=128, stages=4))
    noinc = WC.render(op, WgmmaConvSchedule(bm=128, bn=128, stages=4, publish="noinc"))
    for piece in ("cp.async.cg.shared.global", "tr_tma_load_3d(sb, &tmB", "wgmma.mma_async.sync.aligned.m64n128k16",
                  "setmaxnreg.dec.sync.aligned.u32 96", "tr_mbar_init(bars + 8u * s, 129u)", "bias[col]"):
        assert piece in wait and piece in noinc, piece
    assert "cp.async.wait_group 2;" in wait and "cp.async.mbarrier.arrive.noinc" not in wait
    assert "cp.async.mbarrier.arrive.noinc.shared::cta.b64" in noinc and "cp.async.wait_group" not in noinc
    # noinc: the consumers fence the proxy after each full-barrier wait; wait: the producer does
    assert noinc.count("fence.proxy.async.shared::cta") > wait.count("fence.proxy.async.shared::cta") - 2
    # no shape in the source: one binary per (dtype, bias, layout, schedule)
    assert WC.render(conv(n=3, c=20, h=9, w=7, k=70, bias=True), WgmmaConvSchedule(bm=128, bn=128, stages=4)) == wait
    assert "tr_transpose16" in WC.render(conv(layout="nchw"), conv_hero_schedule()) and "tr_transpose16" not in wait


def test_conv_scalars_pad_channels_to_16_bytes():
    sc = WC.conv_scalars(conv(c=3, k=24))
    assert sc["Cp"] == 8 and sc["cblk"] == 1 and sc["M"] == 56 * 56
    assert WC.conv_scalars(conv(c=200))["cblk"] == 4  # 200 -> 200 (already 8-aligned), 4 blocks of 64


# ------------------------------------------------------------------------------------------ NVRTC


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    pytest.importorskip("cuda.core")
    from tracea.emitters.nvrtc import find_nvrtc

    find_nvrtc()
    import os

    os.environ.setdefault("TRACEA_HOME", str(tmp_path_factory.mktemp("home")))
    from tracea.emitters.nvrtc import compile_cached

    def run(op: Conv2d, sched: WgmmaConvSchedule):
        r = WC.rendered(op, sched, 132)
        _, res, log, _, _ = compile_cached(r.source, r.name, r.entry, "sm_90a")
        return res, log

    return run


def test_heroes_compile_for_sm90a_without_spills(compiled):
    for op in (conv(k=128), conv(n=32, c=256, k=256), conv(dtype="bf16", k=256, bias=True)):
        sched = conv_hero_schedule(op)
        res, log = compiled(op, sched)
        assert "tr_wgmma_conv" in log and "sm_90a" in log
        assert (res.spill_stores, res.spill_loads, res.stack_frame) == (0, 0, 0), log
        assert "C7508" not in log  # ptxas would say so if it ignored setmaxnreg
        # the block's register pool (ptxas's count, allocated in eights) fits the SM and covers setmaxnreg's split
        # (one consumer: 255 at entry, 256 x 256 threads; the producer's 96 and the consumer's 256 take 45056)
        pool = -(-res.regs_per_thread // 8) * 8 * sched.threads
        _, producer, consumer = sched.register_split()
        assert 128 * (producer + sched.consumers * consumer) <= pool <= 65536, (sched.name, res.regs_per_thread)


def test_a_sample_of_schedules_compiles(compiled):
    rnd = random.Random(11)
    op = conv(n=3, c=20, h=9, w=7, k=70, bias=True, dtype="bf16")
    space = conv_search_space(op)
    for sched in rnd.sample(space[1:], 3) + [s for s in space if s.pingpong and s.publish == "noinc"][:1]:
        res, log = compiled(op, sched)
        assert re.search(r"Compiling entry function 'tr_wgmma_conv'", log), log
        assert res.regs_per_thread > 0  # ptxas reported its resource line


# ------------------------------------------------------------------------------------------ emitter + plan


def _planned(host, op):
    from tracea.doctor.plan import plan
    from tracea.emitters import cuda
    from tracea.emitters.cuda.variants import resolve

    WGMMA_GEMM, WGMMA_CONV = resolve("cuda-wgmma.gemm"), resolve("cuda-wgmma.conv2d")

    return plan(op, host, cuda.ALL_VARIANTS + (WGMMA_GEMM, WGMMA_CONV), backend="cuda")


@pytest.mark.parametrize("snapshot", ["h100_live", "h100_measured", "h200_live"])
def test_plan_prefers_wgmma_conv_on_sm90(snapshot):
    from tracea.doctor.snapshot import read_snapshot

    host, _ = read_snapshot(ROOT / "tests/fixtures/snapshots" / f"{snapshot}.json")
    for dtype in ("bf16", "fp16"):
        for layout in ("nhwc", "nchw"):
            d = _planned(host, conv(n=32, c=256, k=256, dtype=dtype, layout=layout))
            assert d.chosen == "cuda-wgmma.conv2d"
            ranked = [c.variant for c in d.candidates if c.accepted]
            assert ranked.index("cuda-wgmma.conv2d") < ranked.index("cuda-mma-sync.conv2d")
    assert _planned(host, conv(dtype="fp32")).chosen == "cuda-simt.conv2d"


@pytest.mark.parametrize("target", ["sm_80", "sm_89", "sm_100"])
def test_plan_never_offers_wgmma_conv_off_sm90(target):
    from tracea.doctor.snapshot import read_snapshot
    from tracea.emitters.cuda.arch import target_host

    host, _ = read_snapshot(ROOT / "tests/fixtures/snapshots/h100_live.json")
    d = _planned(target_host(host, target), conv(dtype="bf16"))
    wg = next(c for c in d.candidates if c.variant == "cuda-wgmma.conv2d")
    assert not wg.accepted and any("compute capability" in r for r in wg.reasons)
    assert d.chosen == "cuda-mma-sync.conv2d"


def test_variant_is_registered_with_the_largest_hero_ring():
    from tracea.emitters.cuda.variants import VARIANTS, resolve

    WGMMA_CONV = resolve("cuda-wgmma.conv2d")

    assert WGMMA_CONV in VARIANTS
    heroes = (conv_hero_schedule(conv(n=32, k=128)), conv_hero_schedule(conv(n=32, k=256)))
    assert WGMMA_CONV.requirements.min_shared_memory_per_block_bytes == max(h.smem_bytes for h in heroes)
    assert WGMMA_CONV.requirements.min_compute_capability == WGMMA_CONV.requirements.max_compute_capability == (9, 0)


def test_emitter_compiles_and_emits_for_sm90a_only(compiled, tmp_path):
    from tracea.emitters import cuda
    from tracea.emitters.cuda.build import compile_kernel

    op = conv(n=2, c=3, h=33, w=31, k=24, bias=True)
    # fewer than 16 channels: the variant's hero is the stem core's kernel (emitters/cuda/stem.py); the
    # Hopper gather still compiles for it, padding each tap's channels to 8
    variant_hero = cuda.hero_schedule(op, "cuda-wgmma.conv2d", _NoGpu(), "sm_90a")
    assert variant_hero.core == "stem" and not isinstance(variant_hero, WgmmaConvSchedule)
    hero = conv_hero_schedule(op)
    _, r, scalars, art = compile_kernel(op, "cuda-wgmma.conv2d", hero, _NoGpu(), "sm_90a")
    assert r.entry == WC.KERNEL_NAME and art.metadata["resources"]["spills"] == 0
    assert art.metadata["channel_padding"] and scalars["Cp"] == 8
    files = cuda.emit(op, "cuda-wgmma.conv2d", hero, _NoGpu(), tmp_path / "out", arch="sm_90a")
    assert {p.suffix for p in files} >= {".cu", ".cubin", ".json", ".yaml"}
    space = cuda.search_space(op, "cuda-wgmma.conv2d", _NoGpu(), "sm_90a")
    assert space[0] == variant_hero and hero in space
    assert {type(s).__name__ for s in space} == {"StemSchedule", "WgmmaConvSchedule"}
    wide = conv(n=2, c=64, h=33, w=31, k=24)  # 16 channels or more: the Hopper conv alone, its hero first
    wide_space = cuda.search_space(wide, "cuda-wgmma.conv2d", _NoGpu(), "sm_90a")
    assert wide_space[0] == conv_hero_schedule(wide) and all(isinstance(s, WgmmaConvSchedule) for s in wide_space)
    assert cuda.search_space(op, "cuda-wgmma.conv2d", _NoGpu(), "sm_80") == []
    with pytest.raises(UnsupportedError, match="sm_90"):
        compile_kernel(op, "cuda-wgmma.conv2d", hero, _NoGpu(), "sm_80")
    assert np.isfinite(art.compile_seconds)


def test_filters_off_64_take_tiles_as_wide_as_the_filters():
    """``conv_heroes.fitted_width``: up to 192 filters no multiple of 64 take tiles as wide as the filters (a multiple
    of 8, C stored directly) on the form of ``FITTED_FORMS`` with the fewest SM turns: 192 rows on three consumers
    where they fill the SMs, 64 rows on one for few pixels, 128 rows on two between. Filter counts that are multiples
    of 64 (ResNet-50's), under 40 or over 192, and shapes whose picks fill under half the SMs keep the rules before,
    1x1 convs are GEMMs, and the hero skips no k16 steps (``trim`` lost up to 37 % where the hero was ping-pong: the
    H200's call 2)."""
    from tracea.emitters.cuda.hopper.conv_heroes import fitted_width

    def hero(n, c, h, k, f=3, sm=132):
        return conv_hero_schedule(Conv2d(n, c, h, h, k, f, f, padding=f // 2, layout="nhwc", dtype="fp16"), sm)

    picks = {(32, 96, 56, 96): (192, 96, 3), (8, 96, 28, 96): (64, 96, 1), (16, 112, 28, 112): (128, 112, 2),
             (32, 48, 112, 48): (192, 48, 3), (16, 160, 28, 160): (128, 160, 2), (8, 160, 28, 160): (64, 160, 1),
             (64, 72, 56, 72): (192, 72, 3), (4, 40, 112, 40): (192, 40, 3)}
    for (n, c, h, k), want in picks.items():
        op = Conv2d(n, c, h, h, k, 3, 3, padding=1, layout="nhwc", dtype="fp16")
        s = conv_hero_schedule(op)
        assert ((s.bm, s.bn, s.consumers), s.store, s.path, s.trim) == (want, "direct", "im2col", False), (n, c, h)
        s.validate(op)
        assert s.smem_bytes <= 232448 and (s.pingpong or s.consumers != 2 or s.bn > 136)
    assert hero(16, 96, 28, 96).pingpong  # two consumers take turns where the registers hold the tile
    for n, c, h, k in ((32, 64, 56, 64), (32, 128, 28, 128), (32, 256, 14, 256), (8, 512, 7, 512), (32, 96, 56, 128),
                       (32, 200, 14, 200), (16, 240, 14, 240)):
        got = hero(n, c, h, k)
        assert not got.trim and got.bn % 64 == 0, (n, c, h, k)
    assert hero(8, 96, 28, 96, sm=66).bm == 128  # fewer SMs: 98 tiles of 64 rows take two waves, 49 of 128 one
    # few pixels: where even the pick fills under half the SMs, the rules before (split-K over 64 x 64 tiles here)
    few = hero(1, 512, 7, 96)
    assert (few.bn, few.split) == (64, 0)
    assert hero(4, 96, 28, 96).bn % 64 == 0 and hero(32, 16, 56, 24).bn % 64 == 0  # 25 tiles; 24 filters: unmeasured
    assert hero(32, 96, 28, 192).bn == 192  # 192 filters: the 192-wide rule
    assert hero(32, 96, 28, 96, f=1).path == "gemm"  # a 1x1 conv is the GEMM's
    assert fitted_width(Conv2d(4, 96, 28, 28, 96, 3, 3, padding=1, stride=9, layout="nhwc", dtype="fp16"), 132) is None
    op = Conv2d(8, 96, 28, 28, 96, 3, 3, padding=1, layout="nhwc", dtype="fp16")
    dataclasses.replace(conv_hero_schedule(op), trim=True).validate(op)  # the hero's form takes trim, a gemm path not
    with pytest.raises(BadInputError, match="trim"):
        WgmmaConvSchedule(path="gemm", bn=128, trim=True).validate()


def test_the_resnet50_suite_keeps_its_heroes():
    """Every conv of the resnet50 suite has channel and filter counts that are multiples of 64 (or the stem's 3 channels,
    64 filters): ``fitted_width`` takes none of them, so their heroes are the rules' before it (boxes of 64, tiles of
    64-multiple widths; the H200 suite figures stand)."""
    from tracea.emitters.cuda.hopper.conv_heroes import fitted_width
    from tracea.kernels.workloads import suites

    convs = [op for op in suites("device")["resnet50"] if getattr(op, "kind", None) == "conv2d"]
    assert len(convs) >= 40
    for op in convs:
        assert fitted_width(op, 132) is None, op.signature
        s = conv_hero_schedule(op)
        assert s.chunk == 64 and not s.trim and (s.swap or s.bn % 64 == 0), op.signature  # swapped: C^T rows
