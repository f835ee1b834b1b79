"""ResNet-50's 1x1 convs over batches 1-64 on the Hopper GEMM path (issue 34: rows outside the suites): the hero
beside fixed forms, each a full ``tracea bench`` (verified on fresh random inputs, then timed beside cuDNN with CUDA
events). A first probe (docs/device-runs/h200-conv1x1-tune/, ``conv1x1_raster.py``) found the hero at 0.46-0.81x on
five 1x1 convs of few pixels outside the suites (swapped operands at 392-784 pixels, 128 x 256 split-K at 1568),
where 64 x 128 tiles on two ping-pong consumers ran 0.86-1.01x. One line a shape: the 64 x 128 tiles' count, the k
steps, and each form's ratio to cuDNN (> 1: Tracea faster).

    python benchmarks/gpu/conv1x1_batches.py [--batches 1,2,4,8,16,32,64] [--match TEXT]
    python benchmarks/gpu/conv1x1_batches.py --compare [--held-out]   # the hero against the rule before it
    python benchmarks/gpu/conv1x1_batches.py --odd --batches 32,64 --forms pp128,coop128,128x64   # odd channel counts
    python benchmarks/gpu/conv1x1_batches.py --off-line --batches 16,64 --forms "pp128 cl2,128x256 cl2"   # rows off lines
    python benchmarks/gpu/conv1x1_batches.py --compare --off-line-held --batches 8,32,64   # off_line_1x1 against before

``--compare``: the hero (``conv_heroes.pingpong_1x1`` since call 3) beside the rule before it (swapped operands at
any tile count, else the GEMM's own hero), one ``tracea bench`` each; ``--held-out``: 1x1 shapes of other networks
(EfficientNet's and RegNet's channel counts), which the rule was not fitted on.

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import argparse

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule, pingpong_1x1, swapped_1x1
from tracea.emitters.cuda.hopper.conv_paths import gemm_view
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule, hero_schedule, tile_count
from tracea.kernels import Conv2d

CHANNELS = [(64, 56, 64), (64, 56, 256), (256, 56, 64), (256, 56, 128), (128, 28, 512), (512, 28, 128),
            (512, 28, 256), (256, 14, 1024), (1024, 14, 256), (1024, 14, 512), (512, 7, 2048), (2048, 7, 512),
            (768, 14, 192), (1536, 7, 384), (384, 14, 1536)]
HELD_OUT = [(672, 14, 112), (112, 14, 672), (1152, 7, 192), (192, 7, 1152), (1280, 7, 320), (320, 7, 1280),
            (1024, 14, 1024), (2048, 7, 1024), (440, 14, 440), (888, 7, 888)]
FORMS = {"pp64": WgmmaSchedule(bm=64, bn=128, stages=8, consumers=2, pingpong=True, store="tma"),
         "pp64 split": WgmmaSchedule(bm=64, bn=128, stages=8, consumers=2, pingpong=True, store="tma", split=0),
         "c1 64": WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma"),
         "c1 64 split": WgmmaSchedule(bm=64, bn=128, stages=8, consumers=1, store="tma", split=0),
         "pp128": WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma")}
MORE_FORMS = {  # --forms: odd channel counts (issue 34: n64 c440 14x14 k440 0.66x, c888 7x7 k888 0.78x)
    "coop128": WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma"),
    "128x64": WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, store="tma"),
    "pp128x64": WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, pingpong=True, store="tma"),
    "64x64": WgmmaSchedule(bm=64, bn=64, stages=12, consumers=1, store="tma"),
    "192x128": WgmmaSchedule(bm=192, bn=128, stages=4, consumers=3, store="tma"),
    "128x192": WgmmaSchedule(bm=128, bn=192, stages=4, consumers=2, store="tma"),
    "64x192": WgmmaSchedule(bm=64, bn=192, stages=6, consumers=1, store="tma"),
    "256x128": WgmmaSchedule(bm=256, bn=128, stages=4, consumers=2, store="tma"),
    "pp64x192": WgmmaSchedule(bm=64, bn=192, stages=6, consumers=2, pingpong=True, store="tma"),
    # pairs sharing the filter's boxes (TMA multicast), for rows off 128-byte lines (--off-line)
    "pp128 cl2": WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, pingpong=True, store="tma", cluster=2),
    "128x256 cl2": WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma", cluster=2),
    "pp64 cl2": WgmmaSchedule(bm=64, bn=128, stages=8, consumers=2, pingpong=True, store="tma", cluster=2),
    "192x128 cl2": WgmmaSchedule(bm=192, bn=128, stages=4, consumers=3, store="tma", cluster=2),
    "256x128 cl2": WgmmaSchedule(bm=256, bn=128, stages=4, consumers=2, store="tma", cluster=2),
}
# channel counts whose rows are no multiple of 128 bytes (fp16: C % 64 != 0), of RegNet's and EfficientNet's widths
OFF_LINE = [(440, 28, 440), (440, 14, 440), (888, 14, 888), (888, 7, 888), (232, 28, 232), (696, 14, 696),
            (1392, 7, 1392), (216, 28, 576), (1512, 7, 1512), (80, 28, 480), (112, 14, 672), (40, 56, 240)]
# held out from off_line_1x1's fit: other widths off 128-byte rows (RegNet's 336, 368, 944, 2016; others)
OFF_LINE_HELD = [(360, 28, 360), (1000, 14, 1000), (200, 56, 200), (120, 56, 360), (336, 28, 336), (2016, 7, 2016),
                 (152, 56, 368), (944, 7, 944)]
ODD = [(440, 14, 440), (888, 7, 888), (1280, 7, 320), (1152, 7, 192), (2048, 7, 1024), (672, 14, 112),
       (440, 28, 440), (888, 14, 888)]


def ratio(op: Conv2d, host: object, s: object | None) -> str:
    kw = {} if s is None else {"tuned": lambda _o, _v: s.to_json(), "variant": "cuda-wgmma.conv2d"}
    r = bench(op, host, backend="cuda", repeats=30, **kw)
    if r.status != "ok":
        return r.status
    return f"{r.ratio:.3f}" if r.ratio is not None else "unstable"


def before(op: Conv2d, off_line: bool = False) -> WgmmaConvSchedule:
    """The 1x1 hero before ``pingpong_1x1``: swapped operands whatever their tile count, else the GEMM's hero; with
    ``off_line``, the hero before ``off_line_1x1`` (``swapped_1x1`` or ``pingpong_1x1``)."""
    if off_line:
        return swapped_1x1(op) or pingpong_1x1(op)
    return swapped_1x1(op, sm_count=1 << 30) or WgmmaConvSchedule.of_gemm(hero_schedule(gemm_view(op)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,2,4,8,16,32,64")
    ap.add_argument("--match", default="")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--held-out", action="store_true")
    ap.add_argument("--odd", action="store_true", help="the odd channel counts (ODD) instead")
    ap.add_argument("--off-line", action="store_true", help="channel counts off 128-byte rows (OFF_LINE) instead; "
                    "with --compare, against the hero before off_line_1x1")
    ap.add_argument("--off-line-held", action="store_true", help="OFF_LINE_HELD, as --off-line")
    ap.add_argument("--forms", default="", help="comma-separated names of FORMS and MORE_FORMS (default: FORMS)")
    a = ap.parse_args()
    host = probe()
    every = FORMS | MORE_FORMS
    forms = {} if a.compare else {f: every[f] for f in a.forms.split(",")} if a.forms else FORMS
    print("n c hw k | pixels tiles64x128 ksteps | hero (name) | " + " | ".join(forms or ["before (name)"]),
          flush=True)
    for n in [int(x) for x in a.batches.split(",")]:
        shapes = OFF_LINE_HELD if a.off_line_held else OFF_LINE if a.off_line else ODD if a.odd else \
            HELD_OUT if a.held_out else CHANNELS
        for c, hw, k in shapes:
            op = Conv2d(n, c, hw, hw, k, 1, 1, layout="nhwc", dtype="fp16")
            if a.match not in op.signature:
                continue
            hero = conv_hero_schedule(op)
            cols = [ratio(op, host, None)]
            if a.compare:
                old = before(op, a.off_line or a.off_line_held)
                cols.append(f"{cols[0] if old == hero else ratio(op, host, old)} ({old.name})")
            for s in forms.values():
                sched = WgmmaConvSchedule.of_gemm(s)
                try:
                    sched.validate(op)
                except Exception:  # noqa: BLE001 - a form this op refuses prints as such
                    cols.append("refused")
                    continue
                cols.append(ratio(op, host, sched))
            tiles = tile_count(FORMS["c1 64"], op.gemm_m, op.k)
            print(f"{n} {c} {hw} {k} | {op.gemm_m} {tiles} {-(-c // 64)} | {cols[0]} ({hero.name}) | "
                  + " | ".join(cols[1:]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
