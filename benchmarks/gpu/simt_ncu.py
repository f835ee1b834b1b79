"""Launch the fp32 SIMT GEMM's hero and torch.matmul (TF32 off) a few times on one shape, for Nsight
Compute to profile side by side (what limits the hero where the vendor is faster):

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --launch-count 6 \\
        python benchmarks/gpu/simt_ncu.py --shape 1000x999x1001

Each output is checked against the other before the launches count (a wrong kernel is not profiled).
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1000x999x1001")
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args()
    import torch

    from tracea.emitters import cuda
    from tracea.kernels import Gemm

    class NoReport:
        nvidia = None

    m, n, k = (int(x) for x in args.shape.split("x"))
    op = Gemm(m, n, k, "fp32")
    sched = cuda.hero_schedule(op, "cuda-simt.gemm", NoReport())
    kern = cuda.build(op, "cuda-simt.gemm", sched, NoReport())
    inputs = op.random_inputs(np.random.default_rng(3))
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = (torch.from_numpy(inputs[x]).cuda() for x in ("a", "b"))
    want = (a.double() @ b.double()).cpu().numpy()
    got = kern(inputs)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"{op.signature} {sched.name}: max error {err:.2e}", flush=True)
    assert err < 1e-4, err
    for _ in range(args.launches):
        kern.launch()
    kern._dev.stream.sync()
    for _ in range(args.launches):
        a @ b
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
