"""Launch the Hopper wgmma attention kernel (the hero, or --alts fields) and torch's SDPA (its fastest
backend) on one case a few times, for Nsight Compute to profile side by side:

    ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --launch-skip 1 \\
        --launch-count 4 python benchmarks/gpu/attention_ncu.py --case 16,32,512,256

``--window 256,0``: a sliding window, FlexAttention beside it. The kernel's output is verified against the
float64 reference on one (batch, head) slice first (a wrong kernel is not profiled). Nothing else runs on the
GPU: the launches are the check's, Tracea's and torch's.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="16,32,512,256", help="batch,heads,seq,head_dim (bf16, non-causal)")
    ap.add_argument("--window", default="", help="left,right: a sliding window (the baseline is then FlexAttention)")
    ap.add_argument("--launches", type=int, default=2)
    ap.add_argument("--alts", default="", help='fields of the hero to change, e.g. "bk=32,stages=4"')
    args = ap.parse_args()
    import torch

    from tracea.emitters.cuda.hopper.attention_kernel import build
    from tracea.emitters.cuda.hopper.attention_schedule import hero_schedule
    from tracea.emitters.device_baselines import torch_baseline
    from tracea.kernels import Attention, relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    b, h, s, d = (int(x) for x in args.case.split(","))
    window = tuple(int(x) for x in args.window.split(",")) if args.window else None
    op = Attention(b, h, s, d, dtype="bf16", window=window)
    sched = hero_schedule(op)
    if args.alts:
        fields = {k: (v.lower() == "true") if v.lower() in ("true", "false") else int(v)
                  for k, v in (kv.split("=") for kv in args.alts.split(","))}
        sched = dataclasses.replace(sched, **fields)
    inputs = op.random_inputs(np.random.default_rng(3))
    k = build(op, sched)
    out = np.full(op.output_shape(), 0x7FC0, op.dtype.storage)
    lse = np.full(op.lse_shape(), np.nan, np.float32)
    k.forward(inputs, out, lse)
    sub = dataclasses.replace(op, batch=1, heads=1, kv_heads=1)
    ref = sub.reference({n: inputs[n][:1, :1] for n in ("q", "k", "v")})
    err = relative_error(to_float64(out[:1, :1], op.dtype), ref)
    assert err <= tolerance(op), f"wrong result: relative error {err}"
    print(f"{sched.name}: verified on slice (0, 0), rel err {err:.2e}", flush=True)
    for _ in range(args.launches):
        k.forward(inputs, out, lse)
    base = torch_baseline(op, inputs)
    for _ in range(args.launches):
        base.run()
    torch.cuda.synchronize()
    print(f"baseline: {base.name}", flush=True)


if __name__ == "__main__":
    main()
