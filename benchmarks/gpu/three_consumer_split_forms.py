"""Which fields make a Hopper GEMM-path conv form fail on the device: a tune of ResNet-50's c512 28x28 k256 1x1
conv at batch 32 recorded ``conv_wgmma_192x128x64_s4_c3_rm8_ts_sk4_ef_gemm`` (192 x 128 tiles, three consumers,
split-K 4 ways, evict-first loads) as ``CUDA_ERROR_ILLEGAL_INSTRUCTION``
(docs/device-runs/h200-resnet-b1-layers/tune_b32_1x1_candidates.txt). This script runs one form, by index, through
``tracea bench`` (verified against the reference, then timed beside cuDNN); run each index in its own process, since
a device fault ends the process's CUDA context.

    python benchmarks/gpu/three_consumer_split_forms.py --list
    for i in 0 1 2 3 4 5 6 7; do python benchmarks/gpu/three_consumer_split_forms.py $i --unrefused; done
    compute-sanitizer --tool racecheck python benchmarks/gpu/three_consumer_split_forms.py 0 --unrefused --once

``WgmmaSchedule.validate`` refused split-K over three consumers (forms 0-4) until the fix-up's barrier id
(``splitk._barrier``) was mended and these forms ran right and sanitizer-clean on an H200
(docs/device-runs/h200-three-consumer-split-forms/); ``--unrefused`` checked them as for two consumers while the
refusal stood, and changes nothing now. ``--once``: one verified launch, no timing (for the
sanitizers).

Needs a GPU and PyTorch (the vendor side).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from split_probe import _row, pinned  # noqa: E402

from tracea.doctor import probe  # noqa: E402
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule  # noqa: E402
from tracea.kernels import Conv2d  # noqa: E402

OP = Conv2d(n=32, c=512, h=28, w=28, k=256, r=1, s=1, layout="nhwc", dtype="fp16")
BASE = dict(bm=192, bn=128, stages=4, consumers=3, store="tma", path="gemm")
FORMS = [  # the failing form first, then one field changed at a time
    dict(BASE, split=4, l2_hint="first"),
    dict(BASE, split=4),
    dict(BASE, split=2, l2_hint="first"),
    dict(BASE, split=2),
    dict(BASE, split=0),
    dict(BASE, split=1, l2_hint="first"),
    dict(BASE, bm=128, consumers=2, split=4, l2_hint="first"),
    dict(BASE, bm=256, consumers=2, split=4, l2_hint="first"),
]


def unrefused() -> None:
    """In this process only: split-K over three consumers checked as for two (the refusal lifted, nothing else)."""
    import dataclasses

    from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule

    checked = WgmmaSchedule._validate_split_and_cluster

    def as_two(self: WgmmaSchedule) -> None:
        return checked(dataclasses.replace(self, consumers=2) if self.consumers > 2 and self.split != 1 else self)

    WgmmaSchedule._validate_split_and_cluster = as_two  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    if "--unrefused" in argv:
        argv = [a for a in argv if a != "--unrefused"]
        unrefused()
    if argv and argv[0] == "--list":
        for i, f in enumerate(FORMS):
            print(i, WgmmaConvSchedule(**f).name)
        return 0
    once = "--once" in argv
    argv = [a for a in argv if a != "--once"]
    i = int(argv[0])
    sched = WgmmaConvSchedule(**FORMS[i])
    sched.validate(OP)
    if once:  # one launch, verified, no timing: what compute-sanitizer's racecheck and synccheck can afford
        return run_once(str(i), sched)
    _row(str(i), pinned(OP, probe(), sched), sched.name)
    return 0


def run_once(label: str, sched: WgmmaConvSchedule) -> int:
    """Build the form, launch it once on fresh random inputs and verify the output against the reference."""
    import numpy as np

    from tracea.emitters import cuda
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    k = cuda.build(OP, "cuda-wgmma.conv2d", sched, probe())
    inputs = OP.random_inputs(np.random.default_rng())
    err = relative_error(to_float64(k(inputs), OP.dtype), OP.reference(inputs))
    ok = bool(err <= tolerance(OP))
    print(f"  {label:<9} {sched.name:<44} one launch, rel err {err:.2e} {'ok' if ok else 'WRONG'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
