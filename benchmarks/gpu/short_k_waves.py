"""Short-K GEMMs (K <= 1024: 1x1 convs, projections) whose 128 x 128 tiles leave a partial second wave where 192 x 128
tiles on three consumers make whole waves (issue 34: n32 c1024 14x14 k512, 196 tiles against 132 on 132 SMs, ran
0.84x cuDNN on the heuristic's tiles and 0.93x on 192 x 128). Each shape: the heuristic's 128 x 128 tiles beside
192 x 128 on three consumers, unsplit and with the automatic split, as a full ``tracea bench`` (verified, then timed
beside the vendor library with CUDA events).

    python benchmarks/gpu/short_k_waves.py

Needs an sm_90 GPU and PyTorch.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from split_probe import _row  # noqa: E402

from tracea.doctor import probe  # noqa: E402
from tracea.emitters.bench import bench  # noqa: E402
from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule  # noqa: E402
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule  # noqa: E402
from tracea.kernels import Conv2d, Gemm  # noqa: E402

CASES = [Conv2d(32, 1024, 14, 14, 512, 1, 1, layout="nhwc", dtype="fp16"),
         Conv2d(32, 512, 28, 28, 128, 1, 1, layout="nhwc", dtype="fp16"),
         Conv2d(16, 512, 28, 28, 256, 1, 1, layout="nhwc", dtype="bf16"),
         Gemm(4096, 768, 768, "bf16"), Gemm(8192, 384, 1024, "fp16"), Gemm(6272, 512, 1024, "bf16"),
         Gemm(3000, 1100, 640, "bf16")]
WIDE = WgmmaSchedule(bm=128, bn=128, stages=6, consumers=2, store="tma")
FORMS = [WgmmaSchedule(bm=192, bn=128, stages=4, consumers=3, store="tma", split=1),
         WgmmaSchedule(bm=192, bn=128, stages=4, consumers=3, store="tma", split=0)]


def run(op: object, host: object, s: WgmmaSchedule) -> object:
    sched = WgmmaConvSchedule.of_gemm(s) if op.kind == "conv2d" else s
    return bench(op, host, backend="cuda", variant="cuda-wgmma." + op.kind, repeats=30,
                 tuned=lambda _o, _v: sched.to_json())


def main() -> int:
    host = probe()
    for op in CASES:
        print(op.signature[:90], flush=True)
        r = bench(op, host, backend="cuda", repeats=30)
        _row("planned", r, (r.schedule or {}).get("name", "") if isinstance(r.schedule, dict) else "")
        for s in (WIDE, *FORMS):
            _row("form", run(op, host, s), s.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
