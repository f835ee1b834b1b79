"""The Hopper GEMM's hero schedule (the cores' ``hero``): ``schedule.hero_schedule``'s tiles, or for 33-512 rows over
a long K the tiles that stream the weights in one wave (``one_wave``) or, where none fits one, the tiles whose whole
waves cost least (``many_waves``), or for a small output over a long K 64 x 64
tiles split to fill the SMs (``few_tiles``), in pairs sharing B where the rows start off 128-byte lines
(``off_line``). The 1x1 conv heroes and the int8 tiles keep ``schedule.hero_schedule``
itself: they were measured on it."""

from __future__ import annotations

from typing import Any

from .schedule import BK, HERO, WgmmaSchedule, hero_schedule, tile_count
from .splitk import MIN_STEPS
from .tiles import cluster_tiles

ONE_WAVE_FORMS = (  # most tiles first; a tie keeps the earlier
    WgmmaSchedule(bm=64, bn=64, stages=12, consumers=1, store="tma", l2_hint="first"),
    WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma", l2_hint="first"),
    WgmmaSchedule(bm=64, bn=192, stages=6, consumers=1, store="tma", l2_hint="first"),
    WgmmaSchedule(bm=64, bn=256, stages=5, consumers=1, store="tma", l2_hint="first"),
    # where no 64-row form fits one wave and a 128-row tile's rows are all used at least once (M >= 128): 256 x 11008
    # x 4096 and 192 x 12288 x 4096 (the only forms there in one wave, and the fastest measured). 128 x 128 on two
    # consumers ran level with the 64-row form of as many tiles (128 x 14336 x 4096, 384 x 5120 x 5120), never ahead:
    # not a form of the rule
    WgmmaSchedule(bm=128, bn=192, stages=4, consumers=2, store="tma", l2_hint="first"),
)
ROWS = (33, 512)  # the rows measured: fewer run the TMA gemv; more, with 128 x 256 tiles, are compute-bound
MIN_K_STEPS = 18  # as ``with_split``: shorter K keeps ``short_k_schedule``'s tiles (1x1 convs, projections)
LEAST_FILL = 0.45  # the smallest share of the SMs a wave may use: 64 tiles of 132 won, 16 would not
FEW_TILES = WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma", l2_hint="first", split=0,
                          split_fix="spread")  # 8 stages, past ``schedule.streamed``'s 5 for evict-first split forms:
# level with or ahead of 5 and 12 on every few-tile shape measured (docs/device-runs/h200-mid-m-gemm/call15)
FEW_TILES_MIN_SLICES = 4  # the rule's K: enough k steps for this many slices of ``splitk.MIN_STEPS``
WEIGHT_SHARE = 4  # N / M at least this: the weights (K x N) at least 4x the activations (M x K), as every shape measured


def _is_gemm(op: Any) -> bool:
    return op is not None and getattr(op, "kind", "gemm") == "gemm"


def _streams_weights(op: Any) -> bool:
    """``ROWS`` rows, the weights at least ``WEIGHT_SHARE`` times the activations, ``MIN_K_STEPS`` k steps or more:
    where ``one_wave`` and ``many_waves`` choose."""
    return _is_gemm(op) and ROWS[0] <= op.m <= ROWS[1] and op.n >= WEIGHT_SHARE * op.m and -(-op.k // BK) >= MIN_K_STEPS


def _one_wave_forms(op: Any) -> list[WgmmaSchedule]:
    """``ONE_WAVE_FORMS`` but a 128-row tile over fewer rows (128 x 192 below 128 rows: not measured in one wave)."""
    return [s for s in ONE_WAVE_FORMS if s.bm == 64 or op.m >= s.bm]


def one_wave(op: Any, sm_count: int) -> WgmmaSchedule | None:
    """For ``ROWS`` rows and a K of ``MIN_K_STEPS`` k steps or more, the form of ``ONE_WAVE_FORMS`` with the most
    tiles that still fit one wave of ``sm_count`` blocks, unsplit, if it uses ``LEAST_FILL`` of the SMs; else None.

    Why (an H200 beside cuBLAS, docs/device-runs/h200-mid-m-gemm/, ``benchmarks/gpu/mid_m_gemm_forms.py``): at these
    rows the weights' stream is most of the time, and every SM's share of it is its tiles' A and B panels. The
    heuristic before split K over 64 x 128 tiles (5 stages) or ran them unsplit over 1.3-2.6 waves: 128 x 4096 x
    4096 19.6 us (0.95x) where 128 64 x 64 tiles on 12 stages take 16.0 (1.17x); 128 x 11008 x 4096 38.0 (0.92x)
    where 116 64 x 192 tiles take 30.7 (1.16x); 256 x 11008 x 4096 46.8 where 116 128 x 192 tiles take 38.1;
    320 x 4096 x 4096 32.9 where 110 64 x 192 tiles take 22.8. Split-K over 64 x 64 tiles lost where they fill half
    a wave (64 x 4096 x 4096: 64 tiles unsplit 15.6 us, split in two 18.3). Fewer stages can win by a few per cent
    (64 x 11008 x 4096: 64 x 128 on 5 stages 29.6 us, on 8 31.1). Where no form fits one wave (160 x 13824 x 5120)
    ``many_waves`` chooses; where the fullest leaves over half the SMs idle (64 x 1024 x 4096: 16 tiles), split-K over
    64 x 64 tiles (``few_tiles``, or the heuristic's). So do they where the activations are not the small operand
    (N < ``WEIGHT_SHARE`` x M; the shapes measured had N / M from 4.6 up): 512 x 512 x 16384 on 64 one-wave tiles ran
    0.62x (38 us against cuBLAS's 23.5, docs/device-runs/h200-mid-m-gemm/call9), each SM streaming 4 MB of panels
    that eight tiles share, where split-K over every SM had run 0.95x."""
    if not _streams_weights(op):
        return None
    best: tuple[int, WgmmaSchedule] | None = None
    for s in _one_wave_forms(op):
        tiles = tile_count(s, op.m, op.n)
        if tiles <= sm_count and (best is None or tiles > best[0]):
            best = (tiles, s)
    if best is None or best[0] < LEAST_FILL * sm_count:
        return None
    return best[1]


WAVE_FORMS = (HERO, ONE_WAVE_FORMS[4], ONE_WAVE_FORMS[3], ONE_WAVE_FORMS[2])  # largest tile first: a tie keeps it
WAVE_MARGIN = 0.9  # another form replaces 128 x 256 only where its waves cost at most this share of 128 x 256's


def wave_cost(s: WgmmaSchedule, m: int, n: int, sm_count: int) -> int:
    """What a block's share of the work costs in waves of ``s``'s tiles: whole waves times a tile's area."""
    return -(-tile_count(s, m, n) // sm_count) * s.bm * s.bn


def many_waves(op: Any, sm_count: int) -> WgmmaSchedule | None:
    """Where ``one_wave``'s rows, weights and K hold but none of its forms fits one wave: of ``WAVE_FORMS`` (128 x
    256, 128 x 192, 64 x 256, 64 x 192; a 128-row tile over fewer rows too) the one whose whole waves of tiles cost
    the least (``wave_cost``: at these rows a wave of bigger tiles takes about as much longer as its tiles are
    bigger), the biggest tile on a tie; 128 x 256 unless another costs ``WAVE_MARGIN`` of it or less.

    Why (an H200 beside cuBLAS, docs/device-runs/h200-mid-m-gemm/call19): the heuristic's 128 x 256 tiles over 320 rows
    take three tile rows and a second wave of 12 tiles, 0.64x at 320 x 12288 x 4096, where 240 64 x 256 tiles in two
    waves ran 1.17x; 160 x 13824 x 5120 0.80x -> 0.89x on 64 x 192; 100 x 20000 x 4096 0.85x (64 x 128 tiles over 2.4
    waves) -> 1.09x on 105 128 x 192 tiles in one. Where the cost ties the heuristic's tiles stayed level with the
    rest (128 x 32000 x 4096, 256 x 14336 x 4096, 128 x 28672 x 4096: 0.99-1.04x)."""
    if not _streams_weights(op):
        return None
    if any(tile_count(s, op.m, op.n) <= sm_count for s in _one_wave_forms(op)):
        return None  # one_wave's, or too few tiles for a wave (the heuristic's split)
    best = min(WAVE_FORMS, key=lambda s: wave_cost(s, op.m, op.n, sm_count))
    if wave_cost(best, op.m, op.n, sm_count) > WAVE_MARGIN * wave_cost(HERO, op.m, op.n, sm_count):
        return HERO  # within 10 %: the two-consumer 128 x 256 tiles do more per wave than the model counts
    return best


def few_tiles(op: Any, sm_count: int) -> WgmmaSchedule | None:
    """``FEW_TILES`` where the output is at most a quarter wave of 64 x 64 tiles over a K of four slices' k steps or
    more (``splitk.MIN_STEPS`` each: 2048 of k; a 256 x 256 output over 16384 of k is 16 tiles), so that each tile is
    cut into four or more slices whose sum is shared among their blocks (the spread fix-up); else None. (The
    shortest K measured was 4096; shorter ones keep the heuristic's split.)

    Why (an H200 beside cuBLAS, docs/device-runs/h200-mid-m-gemm/call13): there, the heuristic's 64 x 128 tiles
    split to fill the SMs ran 0.58-0.66x (256 x 256 x 16384 22.6 us against cuBLAS's 13.8); bigger tiles over more
    slices read each operand panel fewer times but write a partial tile a slice, and lost (128 x 128 over 32 slices
    21.9 us, over 16 18.6); 64 x 64 tiles over 8 slices with the spread fix-up took 16.6 us (the last block's sum
    18.2)."""
    if not _is_gemm(op) or -(-op.k // BK) < FEW_TILES_MIN_SLICES * MIN_STEPS:
        return None
    return FEW_TILES if FEW_TILES_MIN_SLICES * tile_count(FEW_TILES, op.m, op.n) <= sm_count else None


# Pairs of blocks sharing B's boxes (2-block clusters along M, TMA multicast) for operands whose rows start off
# 128-byte lines (``off_line``, and the 1x1 convs' ``conv_heroes.off_line_1x1``)
OFF_LINE_WIDE = WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", cluster=2)
OFF_LINE_PAIR = WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", cluster=2)
# 128 x 256 pairs' rate over 128 x 128 ones at equal turns (docs/device-runs/h200-odd-channels/call4, 11 shapes):
# 1.05-1.16 where they make 6 turns or more, 0.91-1.06 at 2
WIDE_RATE = 1.1


def off_line_pairs(m: int, n: int, k_steps: int, sm_count: int) -> WgmmaSchedule | None:
    """Pairs for an m x n output over ``k_steps`` k steps whose operand rows start off 128-byte lines: 128 x 256 tiles
    where they take no more SM turns than 128 x 128 ones (counted ``WIDE_RATE`` times as fast), else 128 x 128
    ping-pong tiles where they make two waves or more; None where short K (under 4 k steps) meets fewer than two
    waves of 128 x 256 tiles, on fewer tiles, and for one row of tiles. Why: most TMA box rows then straddle two
    lines, and a pair asks for half of B's rows a block (docs/device-runs/h200-odd-channels/: n64 c440 28x28 k440,
    80.0 us on 128 x 128 ping-pong tiles and 54.5 in 128 x 256 pairs under 256-byte promotion, call 2; as a GEMM
    under the promotion rule 68.4 us on 128 x 128 tiles and 48.6 in pairs, call 9)."""
    if -(-m // OFF_LINE_PAIR.bm) < 2:  # one row of tiles: each pair's second block would have none
        return None
    # blocks, not tiles: with an odd count of tile rows the last pairs' second blocks idle
    wide, square = (s.cluster * cluster_tiles(s, m, n) for s in (OFF_LINE_WIDE, OFF_LINE_PAIR))
    if k_steps < 4 and wide < 2 * sm_count:
        return None
    if -(-wide // sm_count) * 2 / WIDE_RATE <= -(-square // sm_count):
        return OFF_LINE_WIDE
    return OFF_LINE_PAIR if square >= 2 * sm_count else None


def rows_off_lines(k: int, n: int) -> bool:
    """Whether a K-major A's or B's rows (K long) or C's (N long) start off 128-byte lines (16-bit elements)."""
    return k % 64 != 0 or n % 64 != 0


def off_line(op: Any, pick: WgmmaSchedule, sm_count: int) -> WgmmaSchedule:
    """``pick`` as ``off_line_pairs``' pairs for a 16-bit GEMM of both operands K-major (``nn.Linear``'s: A row-major,
    B an n x k weight) whose rows start off 128-byte lines, where ``pick`` is an unsplit 128-row tile on two
    consumers (the 1x1 convs' GEMM, on which the pairs were measured); ``pick`` otherwise."""
    if not (_is_gemm(op) and op.dtype.value in ("bf16", "fp16") and (op.layout_a, op.layout_b) == ("row", "col")
            and rows_off_lines(op.k, op.n)):
        return pick
    if (pick.bm, pick.consumers, pick.split, pick.cluster, pick.swap) != (128, 2, 1, 1, False) or pick.bn not in (128, 256):
        return pick
    return off_line_pairs(op.m, op.n, -(-op.k // BK), sm_count) or pick


def largest_smem() -> int:
    """The most shared memory the GEMM core's hero takes: ``schedule.HERO``'s or another form's."""
    return max(HERO.smem_bytes, FEW_TILES.smem_bytes, OFF_LINE_WIDE.smem_bytes, OFF_LINE_PAIR.smem_bytes,
               *(s.smem_bytes for s in ONE_WAVE_FORMS))


def gemm_hero_schedule(op: Any = None, sm_count: int = 132) -> WgmmaSchedule:
    """The GEMM core's hero: ``one_wave``'s tiles where it names some, else ``many_waves``', else ``few_tiles``',
    else ``schedule.hero_schedule``'s (in pairs, ``off_line``, where the rows start off 128-byte lines)."""
    return one_wave(op, sm_count) or many_waves(op, sm_count) or few_tiles(op, sm_count) or \
        off_line(op, hero_schedule(op, sm_count), sm_count)
