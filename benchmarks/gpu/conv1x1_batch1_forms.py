"""ResNet-50's batch-1 1x1 convolutions where another schedule beat the heuristic's in CUDA graphs
(graph_kernel_probe.py --forms, timed in turns: n1 c2048 7x7 k512 at 1.03x cuDNN split 2 ways against 1.21x with
the automatic split; n1 c64 56x56 k256 at 1.04x with 64 x 128 tiles against 1.12x with 64 x 64): the same forms
through ``tracea bench`` (verified on fresh random inputs, then timed on a stream beside cuDNN with CUDA events),
so that a change of the heuristic is judged on both.

    python benchmarks/gpu/conv1x1_batch1_forms.py [--swap]

``--swap``: the batch-1 shapes of at most 784 pixels, the heuristic against swapped operands (C^T's tiles).

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from split_probe import _row, pinned  # noqa: E402

from tracea.doctor import probe  # noqa: E402
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule  # noqa: E402
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule  # noqa: E402
from tracea.kernels import Conv2d  # noqa: E402

SHAPES = [(1, 2048, 7, 512), (1, 1024, 14, 256), (1, 1024, 14, 512), (1, 512, 28, 128), (1, 64, 56, 256),
          (32, 64, 56, 256), (32, 2048, 7, 512)]
# ResNet-50's batch-1 1x1 convs of at most 784 pixels (--swap)
SWAP_SHAPES = [(1, 128, 28, 512), (1, 512, 28, 128), (1, 512, 28, 256), (1, 256, 14, 1024), (1, 1024, 14, 256),
               (1, 1024, 14, 512), (1, 512, 7, 2048), (1, 2048, 7, 512)]


def forms(hero):
    r = dataclasses.replace
    out = [hero, r(hero, split=2, stages=4), r(hero, split=2, stages=5), r(hero, split=3, stages=4),
           r(hero, split=4, stages=4), r(hero, bn=128, stages=4), r(hero, bn=128, stages=6)]
    return list(dict.fromkeys(out))


def swap_forms() -> list:
    """Swapped operands (C^T's tiles: 64 filters x bn pixels), bn 8-64, without and with split-K."""
    return [WgmmaConvSchedule(bm=64, bn=bn, stages=8, consumers=1, store="tma", split=sp, swap=True, path="gemm")
            for bn in (8, 16, 32, 64) for sp in (1, 0)]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--swap", action="store_true", help="the heuristic against swapped-operand forms (batch 1)")
    args = ap.parse_args(argv)
    host = probe()
    shapes = SWAP_SHAPES if args.swap else SHAPES
    for n, c, hw, k in shapes:
        op = Conv2d(n, c, hw, hw, k, 1, 1, layout="nhwc", dtype="fp16")
        hero = conv_hero_schedule(op)
        print(op.signature, flush=True)
        for rep in range(2):
            for f in ([hero] + swap_forms() if args.swap else forms(hero)):
                try:
                    f.validate(op)
                except Exception as exc:  # noqa: BLE001 - a form this shape cannot take
                    print("  skip", f.name, str(exc)[:80])
                    continue
                _row("hero" if f == hero else f"form {rep + 1}", pinned(op, host, f), f.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
