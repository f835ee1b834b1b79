"""Split-K on the Hopper kernels, case by case: the heuristic schedule, the same schedule without split-K,
and a few alternatives, each a full `bench` (verified on fresh random inputs, then timed beside the
vendor library with CUDA events) in one run. Which split a shape should take.

    python benchmarks/gpu/split_probe.py [--match TEXT] [--quick]
    python benchmarks/gpu/split_probe.py --spread      # each split form with the last block's fix-up and the spread one

Needs an sm_90 GPU and PyTorch (the baselines).
"""

from __future__ import annotations

import argparse
import dataclasses

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule, hero_schedule
from tracea.kernels import Conv2d, Gemm, Softmax


def conv(n: int, c: int, hw: int, k: int, r: int, stride: int = 1) -> Conv2d:
    return Conv2d(n, c, hw, hw, k, r, r, stride=stride, padding=r // 2, layout="nhwc", dtype="fp16")


GEMMS = [Gemm(128, 4096, 4096, "bf16"), Gemm(128, 4096, 11008, "bf16"), Gemm(128, 4096, 14336, "bf16"),
         Gemm(128, 11008, 4096, "bf16"), Gemm(512, 512, 16384, "bf16"), Gemm(2048, 11008, 4096, "bf16"),
         Gemm(1000, 999, 1001, "bf16"), Gemm(64, 4096, 4096, "bf16")]
CONVS = [conv(1, 64, 56, 64, 3), conv(1, 128, 28, 128, 3), conv(1, 256, 14, 256, 3), conv(1, 512, 7, 512, 3),
         conv(1, 256, 28, 256, 3, 2), conv(1, 512, 14, 512, 3, 2), conv(1, 1024, 14, 256, 1),
         conv(1, 1024, 14, 2048, 1, 2), conv(32, 256, 14, 256, 3), conv(32, 512, 7, 512, 3),
         conv(32, 512, 14, 512, 3, 2), conv(32, 2048, 7, 512, 1), conv(32, 1024, 14, 256, 1),
         conv(32, 64, 56, 64, 3), conv(1, 64, 56, 64, 3), conv(32, 128, 28, 128, 3)]
ONES = [conv(n, c, hw, k, 1) for n, c, hw, k in (
    (1, 64, 56, 256), (1, 512, 28, 128), (1, 512, 28, 256), (1, 256, 14, 1024), (1, 1024, 14, 256),
    (1, 1024, 14, 512), (1, 64, 56, 64), (1, 256, 56, 128), (1, 128, 28, 512), (1, 2048, 7, 512),
    (32, 64, 56, 64), (32, 1024, 14, 256), (32, 256, 56, 128), (32, 512, 28, 128), (32, 512, 28, 256),
    (32, 1024, 14, 512), (32, 256, 14, 1024), (32, 256, 56, 64))]


# The table (as a user runs it: no variant pinned), and shapes outside every suite.
ROWS = [Gemm(4096, 4096, 4096, "bf16"), Gemm(2048, 11008, 4096, "bf16"), Gemm(512, 512, 16384, "bf16"),
        Gemm(1000, 999, 1001, "fp32"), conv(32, 256, 56, 256, 3), Conv2d(8, 3, 224, 224, 64, 7, 7, stride=2,
        padding=3, layout="nhwc", dtype="fp16"), Softmax(65536, 128, "fp32"), Softmax(8192, 8192, "fp32")]
HELD_OUT = [Gemm(3000, 5000, 700, "bf16"), Gemm(96, 8192, 2048, "bf16"), Gemm(4000, 256, 8192, "fp16"),
            Gemm(777, 1333, 5555, "bf16", epilogue=("bias", "gelu")),
            Conv2d(8, 96, 35, 35, 192, 3, 3, padding=1, layout="nhwc", dtype="fp16"),
            Conv2d(16, 48, 73, 73, 80, 3, 3, stride=2, layout="nhwc", dtype="bf16"),
            Conv2d(4, 160, 17, 17, 160, 1, 7, padding=(0, 3), layout="nhwc", dtype="fp16", bias=True),
            Conv2d(2, 32, 147, 147, 64, 3, 3, padding=1, layout="nhwc", dtype="fp16"),
            Conv2d(4, 12, 96, 96, 32, 5, 5, stride=2, padding=2, layout="nhwc", dtype="fp16"),
            Softmax(3000, 50257, "fp16"), Softmax(100000, 96, "bf16")]
BIG_CONVS = [conv(32, 256, 56, 256, 3), Conv2d(8, 96, 35, 35, 192, 3, 3, padding=1, layout="nhwc", dtype="fp16"),
             Conv2d(16, 48, 73, 73, 80, 3, 3, stride=2, layout="nhwc", dtype="bf16"),
             Conv2d(2, 32, 147, 147, 64, 3, 3, padding=1, layout="nhwc", dtype="fp16")]
BIG_TILES = [WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", path="im2col"),
             WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, raster="n", store="tma", path="im2col"),
             WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", path="im2col"),
             WgmmaConvSchedule(bm=128, bn=192, stages=4, consumers=2, store="tma", path="im2col"),
             WgmmaConvSchedule(bm=256, bn=128, stages=4, consumers=2, store="tma", path="im2col"),
             WgmmaConvSchedule(bm=128, bn=128, stages=4, consumers=2, pingpong=True, store="tma", path="im2col"),
             WgmmaConvSchedule(bm=128, bn=64, stages=8, consumers=2, pingpong=True, store="tma", path="im2col")]
SPLIT_512 = [WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma", split=2),
             WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma", split=4),
             WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=2),
             WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma", split=4),
             WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", split=4)]


def plain(op: object, host: object) -> None:
    """One row as a user runs it (the planner picks the variant, the heuristic the schedule)."""
    r = bench(op, host, backend="cuda", repeats=20)
    _row("planned", r, (r.schedule or {}).get("name", "") if isinstance(r.schedule, dict) else "")


def pinned(op: object, host: object, sched: object) -> object:
    """``bench`` of ``op`` on the Hopper variant with ``sched`` as its (tuned) schedule."""
    return bench(op, host, backend="cuda", variant="cuda-wgmma." + op.kind, repeats=20,
                 tuned=lambda _op, _v: sched.to_json())


def _row(label: str, r: object, name: str) -> None:
    ms = r.tracea.p50_ms if r.tracea else None
    spread = r.tracea.p95_ms / r.tracea.p50_ms if r.tracea else None
    base = r.baseline.p50_ms if r.baseline else None
    ratio = None if r.ratio is None else round(r.ratio, 2)
    print(f"  {label:<9} {r.variant or '':<18} {name:<44} {r.status:<10} {ms and round(ms, 4)!s:>8} ms "
          f"(p95/p50 {spread and round(spread, 2)})  vendor {base and round(base, 4)!s:>8} ms  ratio {ratio}  "
          f"{r.unstable or ''} {r.error or ''}"[:240], flush=True)


def alternatives(op: object) -> list[tuple[str, object]]:
    """(label, schedule): the hero, the hero without split-K, and other split forms."""
    if isinstance(op, Gemm):
        hero = hero_schedule(op)
        alts = [WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", split=0),
                WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=0),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", split=2)]
    else:
        hero = conv_hero_schedule(op)
        if hero.path == "gemm":
            alts = [WgmmaConvSchedule.of_gemm(g) for g in (
                WgmmaSchedule(bm=64, bn=64, stages=8, consumers=1, store="tma"),
                WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma"),
                WgmmaSchedule(bm=128, bn=64, stages=6, consumers=2, store="tma"),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma"),
                WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=0))]
        else:
            alts = [WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma"),
                    WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", publish="noinc", split=0),
                    WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", publish="noinc", split=0),
                    WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", split=0)]
    if getattr(hero, "path", "gemm") == "gather":  # the activations by TMA im2col instead of gathered
        alts = [dataclasses.replace(hero, path="im2col", publish="wait"),
                WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, raster="n", store="tma", path="im2col"),
                WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", path="im2col"),
                WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", path="im2col", split=0),
                *alts]
    out = [("hero", hero)]
    if hero.split != 1:
        out.append(("no split", dataclasses.replace(hero, split=1, split_tail=False)))
    out += [(f"alt{i}", s) for i, s in enumerate(alts) if s != hero and s not in alts[:i]]
    return out


SPREAD_FORMS = [WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=0),
                WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma", split=4),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", split=0),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma", split=8),
                WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", split=0),
                WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", split=16),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", split=0),
                # 2-block clusters: the pair's B tile multicast, a third less L2 -> SM traffic at 64 x 128
                WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, store="tma", split=0),
                WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, store="tma", split=4),
                WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, store="tma", split=8),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, cluster=2, store="tma", split=0),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, cluster=2, store="tma", split=8),
                WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, cluster=2, store="tma", split=0),
                WgmmaSchedule(bm=64, bn=256, stages=4, consumers=1, cluster=2, store="tma", split=0),
                # 128 x 64 with two consumers (m64n64 each), the tile of cuBLAS's split-K kernel on 512^2 x 16384
                WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, store="tma", split=4),
                WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, store="tma", split=0),
                WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", store="tma", split=4),
                WgmmaSchedule(bm=128, bn=64, stages=6, consumers=2, store="tma", split=4),
                # and as cuBLAS runs it: a 2-block cluster along N, the pair sharing its A tile by multicast
                WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, cluster=2, cluster_axis="n", store="tma", split=4),
                WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, cluster=2, cluster_axis="n", store="tma", split=0),
                WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", cluster=2, cluster_axis="n",
                              store="tma", split=4),
                WgmmaSchedule(bm=128, bn=64, stages=6, consumers=2, cluster=2, cluster_axis="n", store="tma", split=4),
                WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, cluster_axis="n", store="tma", split=4),
                WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, cluster=2, cluster_axis="n", store="tma", split=0),
                WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, cluster=2, cluster_axis="n", store="tma", split=0)]


def spread_rows(host: object, match: str, fixes: tuple[str, ...] = ("last", "spread"), name: str = "") -> None:
    """Split forms with the last block summing the slices against every slice summing its share
    (``split_fix``), on the shapes whose heroes split, plus each hero both ways."""
    for op in GEMMS + CONVS:
        if match not in op.signature:
            continue
        hero = hero_schedule(op) if isinstance(op, Gemm) else conv_hero_schedule(op)
        forms = [hero] + ([WgmmaConvSchedule.of_gemm(f) if hero.path == "gemm" else WgmmaConvSchedule(
            **{k: v for k, v in dataclasses.asdict(f).items()}, path=hero.path) for f in SPREAD_FORMS]
            if not isinstance(op, Gemm) else SPREAD_FORMS)
        if hero.split == 1 and not any(f.split != 1 for f in forms[1:]):
            continue
        print(op.signature, flush=True)
        for f in forms:
            for fix in fixes:
                if f.split == 1:
                    continue
                s = dataclasses.replace(f, split_fix=fix)
                if name not in s.name and f is not hero:
                    continue
                try:
                    s.validate(op)
                except Exception:  # noqa: BLE001 - a form this shape cannot take
                    continue
                _row("hero" if f is hero else "form", pinned(op, host, s), s.name)


HINT_ALSO = [Gemm(2048, 11008, 4096, "bf16"), Gemm(4096, 4096, 4096, "bf16"), Gemm(1000, 999, 1001, "bf16"),
             Gemm(3000, 5000, 700, "bf16"), Gemm(256, 4096, 8192, "bf16"), Gemm(384, 768, 30000, "bf16")]


def hint_rows(host: object, match: str) -> None:
    """Each hero beside itself with evict-first operand loads (``l2_hint``), at its own ring depth and at
    5 stages: the split heroes of ``GEMMS`` and of ResNet-50's batch-1 1x1 convs, and other shapes."""
    for op in GEMMS + [c for c in ONES if c.n == 1] + HINT_ALSO:
        if match not in op.signature:
            continue
        hero = hero_schedule(op) if isinstance(op, Gemm) else conv_hero_schedule(op)
        if getattr(hero, "path", "gemm") != "gemm" or (hero.split == 1 and op not in HINT_ALSO):
            continue
        print(op.signature, flush=True)
        _row("hero", pinned(op, host, hero), hero.name)
        for s in (dataclasses.replace(hero, l2_hint="first"), dataclasses.replace(hero, stages=5, l2_hint="first"),
                  dataclasses.replace(hero, stages=5)):
            try:
                s.validate(op)
            except Exception:  # noqa: BLE001 - a depth this tile cannot take
                continue
            if s != hero:
                _row("hint", pinned(op, host, s), s.name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    ap.add_argument("--quick", action="store_true", help="the hero and the hero without split only")
    ap.add_argument("--ones", action="store_true", help="ResNet-50's 1x1 convolutions (the GEMM path) only")
    ap.add_argument("--big", action="store_true", help="im2col tiles for large and odd-channel 3x3 convs")
    ap.add_argument("--rows", action="store_true", help="the issue's table and held-out shapes, as planned")
    ap.add_argument("--spread", action="store_true", help="split forms with each fix-up (split_fix)")
    ap.add_argument("--fixes", default="last,spread", help="with --spread: the split_fix values to run")
    ap.add_argument("--hint", action="store_true", help="each hero beside itself with evict-first operand loads")
    ap.add_argument("--name", default="", help="with --spread: only forms whose name holds this text")
    args = ap.parse_args()
    host = probe()
    if args.hint:
        hint_rows(host, args.match)
        return
    if args.spread:
        spread_rows(host, args.match, tuple(args.fixes.split(",")), args.name)
        return
    if args.big:
        for op in BIG_CONVS:
            print(op.signature, flush=True)
            plain(op, host)
            for sched in BIG_TILES:
                try:
                    sched.validate(op)
                except Exception:  # noqa: BLE001 - a tile this conv cannot take
                    continue
                _row("tile", pinned(op, host, sched), sched.name)
        return
    if args.rows:
        for op in ROWS + HELD_OUT:
            print(op.signature, flush=True)
            plain(op, host)
        for sched in SPLIT_512:
            _row("512 alt", pinned(ROWS[2], host, sched), sched.name)
        return
    for op in ONES if args.ones else GEMMS + CONVS:
        if args.match not in op.signature:
            continue
        print(op.signature, flush=True)
        for label, sched in alternatives(op)[: 2 if args.quick else None]:
            _row(label, pinned(op, host, sched), sched.name)


if __name__ == "__main__":
    main()
