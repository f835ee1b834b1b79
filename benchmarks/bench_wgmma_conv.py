"""The Hopper implicit-GEMM conv (cuda-wgmma.conv2d) against cuDNN, on an H100/H200, in one go.

    python benchmarks/bench_wgmma_conv.py [--out DIR] [--reps 40]

Runs benchmarks/gpu/wgmma_conv_run.py (from a checkout; tracea need not be installed there): a smoke
launch in a child process with a time limit, 108 verified odd-shape cases, the issue-4 conv shapes timed
interleaved with cuDNN (torch.nn.functional.conv2d, cudnn.benchmark, same process, CUDA events, L2
flushed, warm-up, median and p95, every candidate verified first on the timed inputs), then the
emitter's own path (cuda.build) on NHWC and NCHW with the NCHW issue-4 shapes timed against cuDNN.
Needs an sm_90 GPU, torch and cuda-bindings; elsewhere it says so and exits 3.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/wgmma_conv_out"))
    ap.add_argument("--reps", type=int, default=40)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("bench_wgmma_conv: needs torch (and an sm_90 GPU)", file=sys.stderr)
        return 3
    if not torch.cuda.is_available() or torch.cuda.get_device_capability(0) != (9, 0):
        print("bench_wgmma_conv: needs an sm_90 GPU (H100/H200)", file=sys.stderr)
        return 3
    run = ROOT / "benchmarks" / "gpu" / "wgmma_conv_run.py"
    cmd = [sys.executable, str(run), "--out", args.out, "--reps", str(args.reps)]
    return subprocess.run(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"}).returncode


if __name__ == "__main__":
    sys.exit(main())
