"""ResNet-50's 1x1 convolutions at batch 32 on the Hopper GEMM path (issue 34: c1024 14x14 k512 at 0.83x cuDNN,
c512 7x7 k2048 0.86x, c1024 14x14 k256 0.87x): the heuristic schedule beside 192 x 128 tiles on three consumers,
unsplit and split-K 2 and 4 ways, and 128 x 128 / 128 x 256 tiles on two. Each row a full ``tracea bench`` (verified
on fresh random inputs, then timed beside cuDNN with CUDA events).

Split-K over three consumers was refused by ``WgmmaSchedule.validate`` (an illegal instruction on an H200, whose
likely cause, the fix-up's barrier id shared with consumer 2, was mended without a GPU); ``--unrefused`` lifted that
refusal in this process (``three_consumer_split_forms.unrefused``) for the run that measured the mended forms
(docs/device-runs/h200-three-consumer-split-forms/), after which the refusal was dropped.

    python benchmarks/gpu/conv1x1_b32_forms.py [--unrefused]

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from split_probe import _row, pinned  # noqa: E402
from three_consumer_split_forms import unrefused  # noqa: E402

from tracea.doctor import probe  # noqa: E402
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule  # noqa: E402
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule  # noqa: E402
from tracea.kernels import Conv2d  # noqa: E402

SHAPES = [(1024, 14, 512), (512, 7, 2048), (1024, 14, 256), (256, 14, 1024), (2048, 7, 512), (512, 28, 256),
          (64, 56, 256), (256, 56, 128)]
FORMS = [dict(bm=192, bn=128, stages=4, consumers=3, store="tma", path="gemm", split=s) for s in (0, 2, 4)] + [
    dict(bm=128, bn=128, stages=6, consumers=2, store="tma", path="gemm", split=2),
    dict(bm=128, bn=256, stages=4, consumers=2, store="tma", path="gemm", split=0)]


def main(argv: list[str]) -> int:
    if "--unrefused" in argv:
        unrefused()
    host = probe()
    for c, hw, k in SHAPES:
        op = Conv2d(n=32, c=c, h=hw, w=hw, k=k, r=1, s=1, layout="nhwc", dtype="fp16")
        print(f"n32 c{c} {hw}x{hw} k{k}", flush=True)
        hero = conv_hero_schedule(op)
        _row("hero", pinned(op, host, hero), hero.name)
        for f in FORMS:
            s = WgmmaConvSchedule(**f)
            if s == hero:
                continue
            try:
                s.validate(op)
            except Exception as exc:  # noqa: BLE001 - refused here: said, not run
                print(f"  refused   {s.name}: {exc}"[:200], flush=True)
                continue
            _row("form", pinned(op, host, s), s.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
