"""Split-K on the Hopper kernels, case by case: the heuristic schedule, the same schedule without split-K,
and a few alternatives, each a full `bench` (verified on fresh random inputs, then timed beside the
vendor library with CUDA events) in one run. Which split a shape should take.

    python benchmarks/gpu/split_probe.py [--match TEXT] [--quick]

Needs an sm_90 GPU and PyTorch (the baselines).
"""

from __future__ import annotations

import argparse
import dataclasses

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.hopper.schedule import (
    WgmmaConvSchedule,
    WgmmaSchedule,
    conv_hero_schedule,
    hero_schedule,
)
from tracea.kernels import Conv2d, Gemm


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    ap.add_argument("--quick", action="store_true", help="the hero and the hero without split only")
    ap.add_argument("--ones", action="store_true", help="ResNet-50's 1x1 convolutions (the GEMM path) only")
    args = ap.parse_args()
    host = probe()
    for op in ONES if args.ones else GEMMS + CONVS:
        if args.match not in op.signature:
            continue
        print(op.signature, flush=True)
        for label, sched in alternatives(op)[: 2 if args.quick else None]:
            vid = "cuda-wgmma." + op.kind
            r = bench(op, host, backend="cuda", variant=vid, repeats=20,
                      tuned=lambda _op, _v, s=sched: s.to_json())
            ms = r.tracea.p50_ms if r.tracea else None
            spread = r.tracea.p95_ms / r.tracea.p50_ms if r.tracea else None
            base = r.baseline.p50_ms if r.baseline else None
            ratio = None if r.ratio is None else round(r.ratio, 2)
            print(f"  {label:<9} {sched.name:<48} {r.status:<14} {ms and round(ms, 4)!s:>8} ms "
                  f"(p95/p50 {spread and round(spread, 2)})  vendor {base and round(base, 4)!s:>8} ms  "
                  f"ratio {ratio}  {r.error or ''}"[:220], flush=True)


if __name__ == "__main__":
    main()
