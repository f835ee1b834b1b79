#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): evict_first on the operands' TMA loads was bimodal (30 µs or 39 µs
# at 512x512x16384 by ring depth): per operand, half the lines, and shallower rings, three passes.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
for i in 1 2 3; do
  timeout 180 $PY benchmarks/gpu/split_timeline.py --no-timeline --hint first,first:a,first:b,first@0.5 \
      --only "hero,128x64 c2" 2>&1
done | tee "$RES/hints.txt"
