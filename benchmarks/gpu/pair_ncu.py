"""Launch a Tracea GEMM kernel and torch.matmul on the same shape a few times, for Nsight Compute to profile
side by side (what limits Tracea's kernel where the vendor is faster, and which kernel the vendor runs):

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --launch-count 7 \\
        python benchmarks/gpu/pair_ncu.py --shape 1000x999x1001 --dtype fp32
    ... pair_ncu.py --shape 512x512x16384 --dtype bf16 --schedule '{"bm": 64, "bn": 128, "split": 4, ...}'

The Tracea kernel's output is checked against a float64 NumPy product first (a wrong kernel is not
profiled); nothing else runs on the GPU, so the first 1 + 2 x --launches kernels are that check's launch,
Tracea's and torch's.
fp32 runs with TF32 off.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1000x999x1001")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--schedule", default="", help="a schedule's JSON (default: the hero)")
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    import torch

    from tracea.emitters import cuda
    from tracea.kernels import Gemm
    from tracea.kernels.dtypes import to_float64

    class NoReport:
        nvidia = None

    m, n, k = (int(x) for x in args.shape.split("x"))
    op = Gemm(m, n, k, args.dtype)
    vid = "cuda-simt.gemm" if args.dtype == "fp32" else "cuda-wgmma.gemm"
    sched = cuda.hero_schedule(op, vid, NoReport())
    if args.schedule:
        sched = type(sched).from_json({**sched.to_json(), **json.loads(args.schedule)})
    kern = cuda.build(op, vid, sched, NoReport())
    inputs = op.random_inputs(np.random.default_rng(3))
    want = op.reference(inputs)
    got = to_float64(kern(inputs), op.dtype)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"{op.signature} {sched.name}: max error {err:.2e}", flush=True)
    assert err < (1e-4 if args.dtype == "fp32" else 2e-2), err
    torch.backends.cuda.matmul.allow_tf32 = False
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    a = torch.from_numpy(to_float64(inputs["a"], op.dtype)).to(dt).cuda()  # converted on the host: no kernel
    b = torch.from_numpy(to_float64(inputs["b"], op.dtype)).to(dt).cuda()
    for _ in range(args.launches):
        kern.launch()
    kern._dev.stream.sync()
    for _ in range(args.launches):
        a @ b
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
