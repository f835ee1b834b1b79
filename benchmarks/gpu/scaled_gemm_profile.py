"""One launch each of the FP8 GEMM's hero and of the bf16 GEMM's on one shape, for Nsight Compute (issue 35):

    ncu -k regex:tr_wgmma_gemm --launch-skip 2 -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section WarpStateStats python benchmarks/gpu/scaled_gemm_profile.py [M N K]

Each kernel's first launch is its verification against the float64 reference (hence ``--launch-skip 2``); the
second of each is profiled, FP8 first (the script prints which launch is which). ``--wide``: the FP8 kernel on 128 x
256 tiles (folded in two column parts) instead of its hero; ``--vendor``: then ``torch._scaled_mm`` (default
accumulation) twice on the same shape, for a filter that also matches cuBLASLt's kernel (``-k regex:"gemm|xmma"``)."""

from __future__ import annotations

import sys

import numpy as np

from tracea.emitters import cuda
from tracea.emitters.cuda.hopper import scaled_gemm as sg
from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule, hero_schedule
from tracea.kernels import Gemm, ScaledGemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64


class NoGpu:
    nvidia = None


def main() -> None:
    args = [x for x in sys.argv[1:] if not x.startswith("--")]
    m, n, k = (int(x) for x in args[:3]) if len(args) > 2 else (2048, 4096, 4096)
    fp8 = ScaledGemm(m, n, k, "fp8e4m3", "bf16", "row")
    bf16 = Gemm(m, n, k, "bf16", layout_b="col")
    fp8_sched = WgmmaSchedule(bm=128, bn=256, stages=4, consumers=2, store="tma") if "--wide" in sys.argv \
        else sg.hero_schedule(fp8, 132)
    runs = []
    for op, variant, sched in ((fp8, "cuda-wgmma.scaled_gemm", fp8_sched),
                               (bf16, "cuda-wgmma.gemm", hero_schedule(bf16, 132))):
        kern = cuda.build(op, variant, sched, NoGpu())
        inputs = op.random_inputs(np.random.default_rng(1))
        out = np.empty(op.output_shape(), op.output_dtype.storage)
        kern(inputs, out)
        err = relative_error(to_float64(out, op.output_dtype), op.reference(inputs))
        print(f"{op.case_label()} {sched.name}: rel err {err:.1e} ({'ok' if err <= tolerance(op) else 'WRONG'})")
        runs.append((kern, inputs, out, sched.name))
    for i, (kern, inputs, out, name) in enumerate(runs):
        print(f"profiled launch {i + 1}: {name}", flush=True)
        kern(inputs, out)
    if "--vendor" in sys.argv:
        import torch

        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        for _ in range(2):
            print("vendor launch: torch._scaled_mm", flush=True)
            torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
