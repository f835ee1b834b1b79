#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): L2 eviction hints on the operands' TMA loads (evict_first: streamed
# operands give way before other lines, such as the dirty lines a previous kernel left; evict_last) on
# 512x512x16384, two passes; each form verified before it is timed.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
for i in 1 2; do
  timeout 150 $PY benchmarks/gpu/split_timeline.py --no-timeline --hint first,last --only "hero,128x64 c2,s8" 2>&1
done | tee "$RES/hints.txt"
