"""3x3 convs over batches 1-64 on the Hopper conv (issue 34: rows outside the suites stay at or above 0.9x): ResNet-50's
3x3 shapes (stride 1 and the strided ones) and other channel counts, the hero as a full ``tracea bench`` (verified on
fresh random inputs, then timed beside cuDNN with CUDA events); where the hero is under ``--retry`` of cuDNN's speed,
the same conv on other im2col forms, to show what a rule could take there. One line a shape.

    python benchmarks/gpu/conv3x3_batches.py [--batches 1,2,4,8,16,32,64] [--retry 0.9] [--match TEXT]
    python benchmarks/gpu/conv3x3_batches.py --batches 8,16,32,64 --channels 192,320,384,768 --retry 9   # every form
    python benchmarks/gpu/conv3x3_batches.py --compare --held-out --batches 4,8,16,32,64

``--compare``: the hero beside the rule before ``conv_heroes.columns_192`` (the same function with that rule off),
where they differ; ``--held-out``: channel counts and sizes the rule was not fitted on.

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.hopper import conv_heroes
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.kernels import Conv2d

# (c, h, k, stride): ResNet-50's 3x3 convs, then channel counts of other networks (not multiples of 128 among them)
SHAPES = [(64, 56, 64, 1), (128, 28, 128, 1), (256, 14, 256, 1), (512, 7, 512, 1), (128, 56, 128, 2),
          (256, 28, 256, 2), (512, 14, 512, 2), (96, 56, 96, 1), (192, 28, 192, 1), (384, 14, 384, 1),
          (320, 14, 320, 1), (48, 112, 48, 1), (768, 7, 768, 1)]
HELD_OUT = [(576, 14, 576, 1), (576, 7, 576, 1), (640, 14, 640, 1), (960, 7, 960, 1), (192, 14, 192, 1),
            (192, 56, 192, 1), (320, 28, 320, 1), (384, 7, 384, 1), (384, 28, 384, 1), (192, 28, 384, 2),
            (384, 14, 768, 2)]
FORMS = {"pp128": WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", path="im2col"),
         "pp128 split": WgmmaConvSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma",
                                          path="im2col", split=0),
         "64x128": WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", path="im2col"),
         "64x128 split": WgmmaConvSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", path="im2col", split=0),
         "64x64": WgmmaConvSchedule(bm=64, bn=64, stages=6, consumers=1, store="tma", path="im2col"),
         "64x64 split": WgmmaConvSchedule(bm=64, bn=64, stages=6, consumers=1, store="tma", path="im2col", split=0),
         "128x256": WgmmaConvSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", path="im2col"),
         "128x192": WgmmaConvSchedule(bm=128, bn=192, stages=4, consumers=2, store="tma", path="im2col"),
         "64x192": WgmmaConvSchedule(bm=64, bn=192, stages=6, consumers=1, store="tma", path="im2col")}


def ratio(op: Conv2d, host: object, s: object | None) -> float | str:
    kw = {} if s is None else {"tuned": lambda _o, _v: s.to_json(), "variant": "cuda-wgmma.conv2d"}
    r = bench(op, host, backend="cuda", repeats=30, **kw)
    if r.status != "ok":
        return r.status
    return r.ratio if r.ratio is not None else "unstable"


def shown(r: float | str) -> str:
    return r if isinstance(r, str) else f"{r:.3f}"


def hero_line(op: Conv2d, host: object, old: WgmmaConvSchedule | None) -> tuple[str, WgmmaConvSchedule, float | str]:
    """(the shape's line: its hero's ratio and name, then ``old``'s where given, the hero, its ratio)."""
    hero = conv_hero_schedule(op)
    got = ratio(op, host, None)
    line = f"{op.n} {op.c} {op.h} {op.k} {op.stride[0]} | {shown(got)} ({hero.name})"
    if old is not None:
        was = got if old == hero else ratio(op, host, old)
        line += f" | {shown(was)} ({old.name})"
    return line, hero, got


def tried_forms(op: Conv2d, host: object, forms: dict, hero: WgmmaConvSchedule) -> list[tuple[str, float | str]]:
    """(label, ratio) of each of ``forms`` but the hero that ``op`` accepts, in order."""
    out = []
    for label, s in forms.items():
        if s == hero:
            continue
        try:
            s.validate(op)
        except Exception:  # noqa: BLE001 - a form this op refuses is left out
            continue
        out.append((label, ratio(op, host, s)))
    return out


def hero_without(op: Conv2d, rule: str) -> WgmmaConvSchedule:
    """The hero with ``conv_heroes``' rule ``rule`` (a function of (op, sm_count) returning a schedule or None) off."""
    keep = getattr(conv_heroes, rule)
    setattr(conv_heroes, rule, lambda _op, _sm: None)
    try:
        return conv_hero_schedule(op)
    finally:
        setattr(conv_heroes, rule, keep)


def before(op: Conv2d) -> WgmmaConvSchedule:
    """The hero without ``columns_192`` (what the rule replaced)."""
    return hero_without(op, "columns_192")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--retry", type=float, default=0.9)
    ap.add_argument("--match", default="")
    ap.add_argument("--channels", default="", help="only these input channel counts (comma-separated)")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--held-out", action="store_true")
    a = ap.parse_args()
    only = {int(x) for x in a.channels.split(",") if x}
    host = probe()
    print("n c h k stride | hero ratio (name) | forms tried where the hero is under --retry", flush=True)
    for n in [int(x) for x in a.batches.split(",")]:
        for c, h, k, stride in HELD_OUT if a.held_out else SHAPES:
            op = Conv2d(n, c, h, h, k, 3, 3, stride=stride, padding=1, layout="nhwc", dtype="fp16")
            if a.match not in op.signature or (only and c not in only):
                continue
            line, hero, got = hero_line(op, host, before(op) if a.compare else None)
            if a.compare:
                print(line, flush=True)
                continue
            if isinstance(got, float) and got < a.retry:
                line += " | " + ", ".join(f"{label} {shown(r)}" for label, r in tried_forms(op, host, FORMS, hero))
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
