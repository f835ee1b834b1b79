#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): where 512x512x16384's split-K time goes. Per-block timelines of the
# hero and other forms (benchmarks/gpu/split_timeline.py), then Nsight Compute at the GPU's own clocks
# (--clock-control none): L2 slice bytes and durations of three forms and cuBLAS's two kernels.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
mkdir -p "$RES/stamps"
timeout 300 $PY benchmarks/gpu/split_timeline.py --out "$RES/stamps" > "$RES/timeline.txt" 2>&1
echo "rc=$?" >> "$RES/timeline.txt"; cat "$RES/timeline.txt"
for f in hero pair cuBLAS\'s; do
  timeout 100 ncu --clock-control none --cache-control all \
    --metrics gpu__time_duration.sum,sm__cycles_active.avg,lts__t_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum \
    $PY benchmarks/gpu/split_timeline.py --once "$f" > "$RES/ncu_${f%\'s}.txt" 2>&1
  echo "rc=$?" >> "$RES/ncu_${f%\'s}.txt"; grep -E "err|tr_wgmma|nvjet|splitK|duration|lts__t|xbar|cycles_active" "$RES/ncu_${f%\'s}.txt" | cut -c1-120
done
