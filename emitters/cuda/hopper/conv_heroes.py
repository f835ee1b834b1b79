"""The Hopper conv's hero schedules (what ``tracea.ops`` and the planner run untuned): for a 1x1 conv that is a plain
GEMM, swapped operands where it has few pixels, else GEMM tiles chosen by how they fill the waves (``pingpong_1x1``);
TMA's im2col path for the rest it can walk (64 x 64 tiles where there are few pixels), and the gathering producer
for the others. The fields and their checks are ``schedule.py``'s."""

from __future__ import annotations

import dataclasses
from typing import Any

from tracea.doctor.errors import BadInputError

from . import gemm_heroes
from .conv_paths import gemm_view, gemm_view_unsupported, im2col_unsupported
from .conv_schedule import WgmmaConvSchedule
from .schedule import BK, SMEM_OPTIN_SM90, hero_schedule, tile_count, wave_fill, with_split

SWAP_ROWS, SWAP_CHANNELS = 784, 256  # C's rows (pixels) up to which operands swap: searched, and a 1x1 conv's hero


def swapped_1x1(op: Any, sm_count: int = 132) -> WgmmaConvSchedule | None:
    """A 1x1 conv of few pixels over 256+ channels whose swapped tiles fit in one wave: swapped operands, 64
    filters x 32 pixels a tile (16 where 32 leave under 40 tiles; 16 and split-K over 32+ k steps), 8 stages; else
    None. An H200, ResNet-50's batch-1 1x1 convs (docs/device-runs/h200-conv1x1-swapped-operands/): 1.00-1.09x
    cuDNN's time in graphs of ten against 1.03-1.21x with 64 x 64 tiles; 128 channels at 28x28 lost (1.19x against
    1.04x). Those graphs' split-K forms ran while ``clear_cache`` could free a captured graph's workspace
    (docs/device-runs/h200-resnet-b1-layers/); the hero also held through ``tracea bench`` and the model's graph
    there. Past one wave of swapped tiles (more pixels or more filters: batches 2-16) they lost on every shape
    tried, 0.54-0.99x cuDNN against 0.86-1.35x on ``pingpong_1x1``'s tiles, and won on every one within it
    (docs/device-runs/h200-conv1x1-tune/call3)."""
    if op.gemm_m > SWAP_ROWS or op.c < SWAP_CHANNELS:
        return None
    s32 = WgmmaConvSchedule(bm=64, bn=32, stages=8, consumers=1, store="tma", swap=True, path="gemm")
    s = s32
    if -(-op.c // BK) >= 32:
        s = dataclasses.replace(s, bn=16, split=0)
    elif tile_count(s, op.k, op.gemm_m) < 40:
        s = dataclasses.replace(s, bn=16)
    if tile_count(s, op.k, op.gemm_m) <= sm_count:
        return s
    return s32 if tile_count(s32, op.k, op.gemm_m) <= sm_count else None  # fewer SMs: the wider tiles, or none


PP64 = WgmmaConvSchedule(bm=64, bn=128, stages=8, consumers=2, pingpong=True, store="tma", path="gemm")
PP128 = WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", path="gemm")
NARROW_1X1 = WgmmaConvSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma", path="gemm")


def pingpong_1x1(op: Any, sm_count: int = 132) -> WgmmaConvSchedule:
    """A 1x1 conv (a plain GEMM) of 128+ output channels not swapped: ping-pong consumers on 128 x 128 tiles where
    they make three waves or more, else on 64 x 128 or 128 x 128 tiles, whichever fills its waves better by more
    than 0.05 (the wider on a tie); the GEMM's 192 x 128 tiles on three consumers where its wave rule takes them
    (``short_k_schedule``); where 64 x 128 tiles fill half the SMs or less, the GEMM's hero for a K of 16 steps or
    fewer (64 x 64 tiles) and unsplit 64 x 128 tiles for a longer one (never the GEMM's split 128 x 256 tiles: n32
    c1536 7x7 k384 ran 0.46x cuDNN on them, 0.90x so). An H200 beside cuDNN (docs/device-runs/h200-conv1x1-tune/):
    the first form of the rule on ResNet-50's 15 1x1 shapes at batches 1-32, fitted there, took the geometric mean
    from 0.967x to 1.022x and the rows under 0.8x from 9 to 0 (call 5), and on 70 shapes of other networks' channel
    counts, not fitted, from 0.955x to 1.012x (under 0.8x: 13 -> 3); it lost there where it replaced 192 x 128
    tiles (1.09x -> 0.84x, 0.77x -> 0.54x) and, at four or more waves, cooperative 128 x 128 ones (0.96x -> 0.86x),
    which this form keeps or takes (call 6 measured it). 64 x 128 wins where its tiles fill whole waves that
    128 x 128 ones leave partial (196 of those against 392), 128 x 128 at three or more waves and at under one
    (98-112 tiles)."""
    gemm = hero_schedule(gemm_view(op), sm_count)
    if op.k < 128 or gemm.consumers == 3:  # 64 filters (128 x 64 tiles); 192-row tiles filling the waves
        return WgmmaConvSchedule.of_gemm(gemm)
    wide, narrow = tile_count(PP128, op.gemm_m, op.k), tile_count(PP64, op.gemm_m, op.k)
    if 2 * narrow <= sm_count:
        return WgmmaConvSchedule.of_gemm(gemm) if -(-op.c // BK) <= 16 else NARROW_1X1
    if wide >= 3 * sm_count:
        return PP128
    return PP64 if wave_fill(narrow, sm_count) > wave_fill(wide, sm_count) + 0.05 else PP128


OFF_LINE_WIDE = WgmmaConvSchedule.of_gemm(gemm_heroes.OFF_LINE_WIDE)
OFF_LINE_PAIR = WgmmaConvSchedule.of_gemm(gemm_heroes.OFF_LINE_PAIR)


def off_line_1x1(op: Any, pick: WgmmaConvSchedule, sm_count: int = 132) -> WgmmaConvSchedule:
    """``pick`` (``pingpong_1x1``'s) for a 1x1 conv whose x or filter rows start off 128-byte lines (C or K no
    multiple of 64: most TMA box rows then straddle two lines) as ``gemm_heroes.off_line_pairs``' pairs of blocks
    sharing the filter's boxes (TMA multicast: half the filter rows a block asks for), where ``pick`` is on 128 x 128
    or 64 x 128 ping-pong tiles; ``pick`` where those pairs do not pay. An H200
    (docs/device-runs/h200-odd-channels/): fitted on 24 such shapes (440-1512 channels, RegNet's and EfficientNet's
    widths, batches 16 and 64), where it takes the fastest of the three forms or one within 2 % (geometric mean
    0.859x -> 0.980x cuDNN, under 0.8x 11 -> 4); on 24 shapes of other widths at batches 8-64, not fitted, 0.806x
    -> 0.918x (under 0.8x 11 -> 2; one lost more than 3 %: 98 128 x 256 tiles under one wave)."""
    if not gemm_heroes.rows_off_lines(op.c, op.k) or pick not in (PP128, PP64):
        return pick
    pairs = gemm_heroes.off_line_pairs(op.gemm_m, op.k, -(-op.c // BK), sm_count)
    return pick if pairs is None else WgmmaConvSchedule.of_gemm(pairs)


COLUMNS_192 = (WgmmaConvSchedule(bm=128, bn=192, stages=4, consumers=2, store="tma", path="im2col"),
               WgmmaConvSchedule(bm=64, bn=192, stages=6, consumers=1, store="tma", path="im2col"))
TWO_CONSUMERS = 1.6  # the rate of two consumers over one on an SM, as columns_192 weighs 128- against 64-row tiles


def columns(filters: int, width: int) -> int:
    """The columns tiles ``width`` wide spend on ``filters`` output channels (the last tile's idle ones included)."""
    return -(-filters // width) * width


def columns_192(op: Any, sm_count: int) -> WgmmaConvSchedule | None:
    """192-wide im2col tiles for 3x3 convs of filter counts they cover with no more columns than 128-wide ones (192,
    320, 384, 576, 768, ...), where 64 x 192 tiles fill half the SMs or more: 128 x 192 on two consumers or 64 x 192 on one,
    whichever takes fewer SM turns (waves x rows, two consumers counted ``TWO_CONSUMERS`` times as fast); else None.
    An H200 (docs/device-runs/h200-conv1x1-tune/call9): 3x3 convs of 192-768 channels at batches 8-64, the heroes of
    128-wide tiles 0.62-1.18x cuDNN, the picks of this rule 1.02-1.36x on the twelve it takes."""
    n = op.k
    if (op.r, op.s) != (3, 3) or columns(n, 192) > columns(n, 128):  # measured on 3x3 filters only
        return None
    wide, narrow = COLUMNS_192
    if 2 * tile_count(narrow, op.gemm_m, n) < sm_count:
        return None

    def turns(s: WgmmaConvSchedule, rate: float) -> float:
        return -(-tile_count(s, op.gemm_m, n) // sm_count) * s.bm / rate

    return wide if turns(wide, TWO_CONSUMERS) <= turns(narrow, 1.0) else narrow


def few_pixels_im2col(op: Any, base: WgmmaConvSchedule, k_steps: int, sm_count: int) -> WgmmaConvSchedule | None:
    """64 x 64 im2col tiles where ``base``'s fill under half the SMs and 64 x 64 ones fit in one wave: split-K over
    them from 32 ``k_steps`` of 64 where they fill a quarter of the SMs at most, unsplit below 64 k steps otherwise
    (None elsewhere). An H200, ResNet-50's convs in graphs of ten calls beside cuDNN's
    (docs/device-runs/h200-resnet-b1-layers/). Batch 1: 3x3 over 64-128 channels 0.72-0.84x cuDNN's time unsplit
    (0.86-1.01x split), over 256-512 0.67-0.85x split (0.92-1.06x unsplit); strided 1x1 0.71-0.82x unsplit, against
    1.07-1.15x with 128 x 128 ping-pong tiles. Batches 4 and 8: 0.74-0.92x against 0.95-1.13x before on the convs
    this changes; a 3x3 conv over 512 channels at batch 8 (72 k steps, 56 tiles) keeps 64 x 128 split-K (0.90x,
    against 0.97x split and 1.04x unsplit over 64 x 64)."""
    quarter = WgmmaConvSchedule(bm=64, bn=64, stages=6, consumers=1, store="tma", path="im2col")
    tiles = tile_count(quarter, op.gemm_m, op.k)
    if 2 * tile_count(base, op.gemm_m, op.k) >= sm_count or tiles > sm_count:
        return None
    if k_steps >= 32 and 4 * tiles <= sm_count:
        return dataclasses.replace(quarter, split=0)
    return None if k_steps >= 64 else quarter  # many k steps over more tiles: with_split's 64 x 128 split-K


# (form, its SM's rate counted in rows of 64 a turn): three consumers 2.3, two 1.6 (as columns_192's), one 1
FITTED_FORMS = ((WgmmaConvSchedule(bm=192, stages=5, consumers=3, path="im2col"), 2.3),
                (WgmmaConvSchedule(bm=128, stages=6, consumers=2, pingpong=True, path="im2col"), TWO_CONSUMERS),
                (WgmmaConvSchedule(bm=128, stages=6, consumers=2, path="im2col"), TWO_CONSUMERS),
                (WgmmaConvSchedule(bm=64, stages=8, consumers=1, path="im2col"), 1.0))
FITTED_FILTERS = (40, 192)  # widths measured: 40-160 filters gained on filter-wide tiles, 200 lost (too few tiles)


def fitted_width(op: Any, sm_count: int) -> WgmmaConvSchedule | None:
    """For a conv that is not 1x1 whose filters are within ``FITTED_FILTERS`` and no multiple of 64, tiles as wide as
    the filters (a multiple of 8; C stored directly) on whichever of ``FITTED_FORMS`` takes the fewest SM turns (waves
    x rows over the form's rate; the first on a tie), its stages or as many as shared memory holds. None elsewhere,
    and where even the pick's tiles fill under half the SMs (few pixels: ``few_pixels_im2col``'s tiles or
    ``with_split``'s split-K, which this rule has not been measured against). An H200 (docs/device-runs/h200-conv-channel-boxes/): on 3x3 convs of 72-160 filters at 14x14-56x56,
    192-row tiles on three consumers took 0.59-0.81x cuDNN to 0.93-1.24x where they fill the SMs (call 2), 64-row
    ones on one consumer took the few-pixel shapes (96 filters at 28x28, batch 8: 0.93x -> 1.09-1.33x)."""
    low, high = FITTED_FILTERS
    if op.r * op.s == 1 or op.k % BK == 0 or not low <= op.k <= high or im2col_unsupported(op) is not None:
        return None
    best, fewest = None, 0.0
    for form, rate in FITTED_FORMS:
        s = dataclasses.replace(form, bn=-(-op.k // 8) * 8)
        s = next((t for st in range(s.stages, 2, -1)
                  if (t := dataclasses.replace(s, stages=st)).smem_bytes <= SMEM_OPTIN_SM90), s)
        try:
            s.validate()
        except BadInputError:  # wider tiles than a form's registers hold (ping-pong from 144 filters)
            continue
        turns = -(-tile_count(s, op.gemm_m, op.k) // sm_count) * s.bm / rate
        if best is None or turns < fewest:
            best, fewest = s, turns
    return None if best is None or 2 * tile_count(best, op.gemm_m, op.k) < sm_count else best


def conv_hero_schedule(op: Any = None, sm_count: int = 132) -> WgmmaConvSchedule:
    """A conv that is a plain GEMM (1x1, stride 1, no padding, NHWC) takes swapped operands where it has few pixels
    (``swapped_1x1``), else ``pingpong_1x1``'s tiles over ``gemm_view(op)`` (in pairs, ``off_line_1x1``, where its
    rows start off 128-byte lines). Any other whose activations TMA's im2col mode can walk (``im2col_unsupported``)
    takes the im2col path: 128 x 256 tiles where they are many and cover the filters with no more columns than
    128-wide ones, ``columns_192``'s 192-wide tiles for 3x3 convs whose filters those cover as well, else 128 x 128
    ping-pong tiles (128 x 64 for 64 output channels), 6 stages, and
    ``few_pixels_im2col``'s 64 x 64 tiles or ``with_split``'s 64 x 128 tiles or split-K where those leave SMs idle. From the H100 probe
    (docs/device-runs/h100-cuda-suites-splitk-im2col-stem/im2col-probe), ResNet-50's 3x3 convs at batch 32: 1.01-1.14x cuDNN
    this way, against 0.68-0.76x gathered by the producer's threads; at batch 1, 0.84-1.08x. The rest
    keep the gather (picked from the H200 runs, docs/device-runs/h200-cuda-kernels-and-tuner/wgmma_conv/publish-noinc):
    128 x 256 tiles, 4 stages, stages published by ``cp.async.mbarrier.arrive.noinc``; 128 x 128 (or
    128 x 64) ping-pong for K <= 128. Filters off multiples of 64 take ``fitted_width``'s tiles."""
    if op is not None and gemm_view_unsupported(op) is None:  # a 1x1 conv: swapped, or ping-pong GEMM tiles
        return swapped_1x1(op, sm_count) or off_line_1x1(op, pingpong_1x1(op, sm_count), sm_count)
    wide = WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", path="im2col")
    if op is not None and im2col_unsupported(op) is None and op.k >= 256 and op.r * op.s > 1 \
            and tile_count(wide, op.gemm_m, op.k) >= 2 * sm_count and columns(op.k, 256) <= columns(op.k, 128):
        # plenty of 128 x 256 tiles of a filter wider than 1x1: the wide tile's operand reuse wins (N32 C256
        # 56x56 K256 3x3: 1.02x cuDNN, against 0.84x with 128 x 128 ping-pong; with fewer tiles it loses:
        # 0.73x against 1.14x at 14x14; docs/device-runs/h100-cuda-suites-splitk-im2col-stem/big-convs,
        # docs/device-runs/h100-cuda-suites-splitk-im2col-stem/im2col-probe); only where 256-wide tiles cover the
        # filters with no more columns than 128-wide ones (320-640 filters ran 0.56-0.74x on them at batches 32-64,
        # docs/device-runs/h200-conv1x1-tune/call10)
        return wide
    if op is not None and (fitted := fitted_width(op, sm_count)) is not None:
        return fitted
    if op is not None and im2col_unsupported(op) is None and (cols := columns_192(op, sm_count)) is not None:
        return cols
    if op is not None and im2col_unsupported(op) is None:
        base = WgmmaConvSchedule(bm=128, bn=64 if op.k <= 64 else 128, stages=6, consumers=2, pingpong=True,
                                 store="tma", path="im2col")
        narrow = WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", path="im2col")
    elif op is not None and op.k <= 128:  # 64 output channels: 64-wide tiles (no wgmma columns wasted)
        base = WgmmaConvSchedule(bm=128, bn=64 if op.k <= 64 else 128, stages=6, consumers=2, pingpong=True,
                                 store="tma")
        narrow = WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", publish="noinc")
    else:
        base = WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, raster="n", store="tma", publish="noinc")
        narrow = WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", publish="noinc")
    if op is None:
        return base
    k_steps = op.r * op.s * -(-op.c // BK)
    if base.path == "im2col" and (small := few_pixels_im2col(op, base, k_steps, sm_count)) is not None:
        return small
    return with_split(base, narrow, op.gemm_m, op.k, k_steps, sm_count)
