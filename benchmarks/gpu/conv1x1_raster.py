"""The Hopper 1x1 convs' tile order and ping-pong (issue 34): `tracea tune conv2d` on ResNet-50's batch-32 1x1 rows
under or near 0.9x cuDNN picked the hero's tiles walked along N ("raster n") on three of four rows and ping-pong
consumers on two (docs/device-runs/h200-conv1x1-tune/). Whether that holds beyond one run of each: every form
below, for each shape, as a full ``tracea bench`` (verified on fresh random inputs, then timed beside cuDNN or
cuBLAS with CUDA events), ``--reps`` times in alternating order; the median over the reps of each form's time and
ratio.

    python benchmarks/gpu/conv1x1_raster.py [--reps 3] [--match TEXT]

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule, hero_schedule
from tracea.kernels import Conv2d, Gemm


def one(n: int, c: int, hw: int, k: int) -> Conv2d:
    return Conv2d(n, c, hw, hw, k, 1, 1, layout="nhwc", dtype="fp16")


SUITE = [one(32, c, hw, k) for c, hw, k in (
    (1024, 14, 256), (1024, 14, 512), (512, 7, 2048), (2048, 7, 512), (512, 28, 256), (256, 14, 1024),
    (64, 56, 64), (256, 56, 64), (128, 28, 512), (512, 28, 128), (64, 56, 256), (256, 56, 128))]
OUTSIDE = [one(16, 1024, 14, 256), one(64, 1024, 14, 256), one(16, 2048, 7, 512), one(8, 512, 7, 2048),
           one(32, 768, 14, 192), one(32, 1536, 7, 384), Gemm(6272, 256, 1024, "bf16"), Gemm(4096, 512, 2048, "fp16")]
PP = [WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma"),
      WgmmaSchedule(bm=64, bn=128, stages=8, consumers=2, pingpong=True, store="tma")]


def forms(op: object) -> list[tuple[str, object]]:
    """(label, schedule): the heuristic's, the same walked the other way, and the two ping-pong forms the tuner
    picked (those that validate for the op)."""
    hero = hero_schedule(op) if isinstance(op, Gemm) else conv_hero_schedule(op)
    out = [("hero", hero), ("raster " + ("n" if hero.raster == "m" else "m"),
                            dataclasses.replace(hero, raster="n" if hero.raster == "m" else "m"))]
    for s in PP:
        sched = s if isinstance(op, Gemm) else WgmmaConvSchedule.of_gemm(s)
        for raster in ("m", "n"):
            cand = dataclasses.replace(sched, raster=raster)
            try:
                cand.validate(op)
            except Exception as exc:  # noqa: BLE001 - a form this op refuses is skipped, named
                print(f"  skip {cand.name}: {exc}"[:160])
                continue
            out.append((f"pp {s.bm}x{s.bn} {raster}", cand))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--match", default="")
    a = ap.parse_args()
    host = probe()
    for op in SUITE + OUTSIDE:
        if a.match not in op.signature:
            continue
        print(op.signature[:90], flush=True)
        fs = forms(op)
        times: dict[str, list[float]] = {label: [] for label, _ in fs}
        ratios: dict[str, list[float]] = {label: [] for label, _ in fs}
        for rep in range(a.reps):
            for label, s in (fs if rep % 2 == 0 else fs[::-1]):
                r = bench(op, host, backend="cuda", variant="cuda-wgmma." + op.kind, repeats=30,
                          tuned=lambda _o, _v, s=s: s.to_json())
                if r.status != "ok" or r.tracea is None:
                    print(f"  {label}: {r.status} {r.error or ''}"[:200], flush=True)
                    continue
                times[label].append(r.tracea.p50_ms)
                if r.ratio is not None:
                    ratios[label].append(r.ratio)
        for label, s in fs:
            if times[label]:
                t = statistics.median(times[label])
                rr = statistics.median(ratios[label]) if ratios[label] else None
                print(f"  {label:<12} {s.name:<46} {t * 1e3:7.2f} us  vs vendor {rr and round(rr, 3)}  "
                      f"reps {[round(x * 1e3, 2) for x in times[label]]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
