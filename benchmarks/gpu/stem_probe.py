"""The stem core (emitters/cuda/stem.py) on ResNet-50's stem (fp16 NHWC, 3 -> 64 channels, 7x7, stride 2,
pad 3, 224^2) at batch 1, 8 and 32: the hero and a few schedules of its space, each verified on fresh
random inputs against the float64 reference, then timed beside torch conv2d (cuDNN, channels_last) in the
same process, both the project's way (L2 flushed before each call, the stream held busy, CUDA events).

    python benchmarks/gpu/stem_probe.py [--batches 1,8,32] [--repeats 50] [--space 6] [--mma]
    python benchmarks/gpu/stem_probe.py --shapes "4,12,96,32,5,2,2;2,8,64,16,3,1,1" --space -1

``--mma`` adds the mma.sync core's own hero (the stem's previous path) for comparison. ``--shapes``: other
small-channel convs, each "n,c,hw,k,r,stride,pad"; ``--space -1``: every stem schedule of the space. Needs
an NVIDIA GPU and torch.
"""

from __future__ import annotations

import argparse
import random

import numpy as np

from tracea.doctor import probe
from tracea.emitters import cuda
from tracea.emitters.cuda import mma, stem
from tracea.emitters.device_baselines import time_torch, torch_baseline
from tracea.kernels import Conv2d, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

VARIANT = "cuda-mma-sync.conv2d"


def schedules(op, host, space: int, with_mma: bool) -> list:
    hero = cuda.hero_schedule(op, VARIANT, host)
    cands = [s for s in cuda.search_space(op, VARIANT, host) if isinstance(s, stem.StemSchedule) and s != hero]
    picks = [hero, *(cands if space < 0 else random.Random(op.n).sample(cands, min(space, len(cands))))]
    return picks + ([mma.hero_schedule(op, host)] if with_mma else [])


def run(op, host, sched, inputs, ref, repeats: int) -> tuple[str, float | None, float | None, str]:
    k = cuda.build(op, VARIANT, sched, host)
    out = np.full(op.output_shape(), np.nan, op.dtype.storage)  # poison: every element must be written
    k(inputs, out)
    err = relative_error(to_float64(out, op.dtype), ref)
    if not err <= tolerance(op):
        return "WRONG", err, None, k.rendered.name.removeprefix("tr_stem_fp16_")
    t = k.time(inputs, warmup=5, repeats=repeats)
    res = k.artifact.metadata["resources"]
    return f"ok regs={res['regs_per_thread']} spills={res['spills']}", err, t.p50_ms, \
        k.rendered.name.removeprefix("tr_stem_fp16_")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--space", type=int, default=6, help="schedules of the space beside the hero")
    ap.add_argument("--mma", action="store_true", help="also the mma.sync core's hero")
    ap.add_argument("--shapes", default="", help='convs "n,c,hw,k,r,stride,pad;..." instead of the stem')
    args = ap.parse_args()
    host = probe()
    print(f"{'batch':>5} {'schedule':<28} {'status':<22} {'rel_err':>9} {'tracea ms':>10} {'cuDNN ms':>9} {'ratio':>6}")
    ops = [Conv2d(n, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nhwc", dtype="fp16")
           for n in (int(b) for b in args.batches.split(","))]
    if args.shapes:
        ops = [Conv2d(n, c, hw, hw, k, r, r, stride=st, padding=pad, layout="nhwc", dtype="fp16")
               for n, c, hw, k, r, st, pad in (tuple(int(x) for x in sh.split(",")) for sh in args.shapes.split(";"))]
    for op in ops:
        n = op.n
        print(op.signature, flush=True)
        inputs = op.random_inputs(np.random.default_rng(1000 + n))
        ref = op.reference(inputs)
        base = torch_baseline(op, inputs)
        vendor = time_torch(base.run, 5, args.repeats).p50_ms if base.run is not None else None
        for i, sched in enumerate(schedules(op, host, args.space, args.mma)):
            status, err, ms, name = run(op, host, sched, inputs, ref, args.repeats)
            ratio = vendor / ms if vendor and ms else None
            label = ("hero " if i == 0 else "") + name
            print(f"{n:>5} {label[:28]:<28} {status:<22} {err if err is None else f'{err:.2e}':>9} "
                  f"{'-' if ms is None else f'{ms:.4f}':>10} {'-' if vendor is None else f'{vendor:.4f}':>9} "
                  f"{'-' if ratio is None else f'{ratio:.2f}':>6}", flush=True)
        if base.run is None:
            print(f"      no vendor baseline: {base.reason}")


if __name__ == "__main__":
    main()
