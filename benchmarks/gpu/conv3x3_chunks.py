"""3x3 convs whose channel counts are not multiples of 64 (issue 34: 96 channels at 56x56 ran 0.43-0.63x cuDNN, 48 at
112x112 0.57-0.78x): the im2col path's boxes of 32 or 16 channels (``WgmmaConvSchedule.chunk``: 96 channels take 3
boxes of 32 a tap, not 2 of 64 with a quarter zeros), the zero k16 steps of a tap's last box of 64 skipped (``trim``: 2
boxes of 64 a tap, 6 k16 steps) and tiles as wide as the filters (``bn`` any multiple of 8, C stored directly). Every figure is a ``tracea bench`` row: verified on fresh random inputs, then timed beside cuDNN with
CUDA events in the same process (cuDNN's time / Tracea's). One line a shape.

    python benchmarks/gpu/conv3x3_chunks.py --forms [--batches 8,32] [--held-out]   # the hero, then every form
    python benchmarks/gpu/conv3x3_chunks.py --compare [--held-out] [--batches 4,8,16,32,64]   # hero vs the rule before

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import dataclasses

from conv3x3_batches import hero_line, hero_without, shown, tried_forms

from tracea.doctor import probe
from tracea.emitters.cuda.hopper.conv_schedule import (
    CHUNKS,
    WgmmaConvSchedule,
    channels_padded,
    trimmed_steps,
)
from tracea.emitters.cuda.hopper.schedule import SMEM_OPTIN_SM90
from tracea.kernels import Conv2d

# (c, h, k, stride): the two shapes the issue names, and channel counts of other networks off multiples of 64
FITTED = [(96, 56, 96, 1), (48, 112, 48, 1), (160, 28, 160, 1), (96, 28, 96, 1), (200, 14, 200, 1),
          (80, 56, 80, 1)]
HELD_OUT = [(144, 56, 144, 1), (112, 28, 112, 1), (240, 14, 240, 1), (40, 112, 40, 1), (96, 56, 192, 2),
            (232, 14, 232, 1), (72, 56, 72, 1), (120, 28, 120, 1)]


def fitted_width(k: int) -> int:
    """The narrowest multiple of 8 that covers ``k`` filters in as few tiles of at most 256 as it can."""
    tiles = -(-k // 256)
    per_tile = -(-k // tiles)
    return -(-per_tile // 8) * 8


def deepest(s: WgmmaConvSchedule) -> WgmmaConvSchedule:
    """``s`` with as many of its stages as shared memory holds (down to 3)."""
    for st in range(s.stages, 2, -1):
        t = dataclasses.replace(s, stages=st)
        if t.smem_bytes <= SMEM_OPTIN_SM90:
            return t
    return s


def chunks(op: Conv2d) -> list[int]:
    """64, and each narrower box that pads C (rounded to 8) less than the one before it."""
    cp, out = channels_padded(op), [64]
    for ch in CHUNKS[1:]:
        if -(-cp // ch) * ch < -(-cp // out[-1]) * out[-1]:
            out.append(ch)
    return out


TILES = {"pp128": dict(bm=128, stages=6, consumers=2, pingpong=True), "128c2": dict(bm=128, stages=6, consumers=2),
         "256c2": dict(bm=256, stages=4, consumers=2), "192c3": dict(bm=192, stages=5, consumers=3),
         "64c1": dict(bm=64, stages=8, consumers=1)}


def forms(op: Conv2d) -> dict[str, WgmmaConvSchedule]:
    """Every tile of ``TILES`` as wide as the filters (``fitted_width``) with every box of ``chunks``, as many stages
    as shared memory holds."""
    bn = fitted_width(op.k)
    out = {f"{label} k{ch}": deepest(WgmmaConvSchedule(bn=bn, path="im2col", chunk=ch, **tile))
           for ch in chunks(op) for label, tile in TILES.items()}
    if trimmed_steps(op):  # a tap's zero k16 steps skipped
        out.update({f"{label} tr": deepest(WgmmaConvSchedule(bn=bn, path="im2col", trim=True, **tile))
                    for label, tile in TILES.items()})
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="8,32")
    ap.add_argument("--held-out", action="store_true")
    ap.add_argument("--forms", action="store_true", help="every form of forms() beside the hero")
    ap.add_argument("--compare", action="store_true", help="the hero beside the rule before chunks and widths")
    ap.add_argument("--match", default="")
    a = ap.parse_args()
    host = probe()
    print("n c h k stride | hero ratio (name) | " + ("before (name)" if a.compare else "forms"), flush=True)
    for n in [int(x) for x in a.batches.split(",")]:
        for c, h, k, stride in HELD_OUT if a.held_out else FITTED:
            op = Conv2d(n, c, h, h, k, 3, 3, stride=stride, padding=1, layout="nhwc", dtype="fp16")
            if a.match not in op.signature:
                continue
            line, hero, _ = hero_line(op, host, before(op) if a.compare else None)
            if a.forms:
                tried = tried_forms(op, host, forms(op), hero)
                best = max(tried, key=lambda t: t[1] if isinstance(t[1], float) else 0.0, default=None)
                line += f" | best {best[0] + ' ' + shown(best[1]) if best else '-'} | " + \
                    ", ".join(f"{label} {shown(r)}" for label, r in tried)
            print(line, flush=True)
    return 0


def before(op: Conv2d) -> WgmmaConvSchedule:
    """The hero without ``conv_heroes.fitted_width`` (the rule before filter-wide tiles)."""
    return hero_without(op, "fitted_width")


if __name__ == "__main__":
    raise SystemExit(main())
