#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the 64x128x16 lane-filled SIMT form against the hero on odd shapes whose
# 64x128 grid is one full wave (119-132 tiles on 132 SMs) and two that are not, two passes.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SH=1000x999x1001,1000x1001x3001,999x1023x513,1020x900x2047,997x1021x777,777x1333x555,1500x999x1001
for pass in 1 2; do
timeout 250 $PY benchmarks/gpu/simt_odd.py --compare --forms 64x128x16 --shapes $SH > "$RES/fill_$pass.txt" 2>&1
echo "rc=$?" >> "$RES/fill_$pass.txt"; grep -v "^$" "$RES/fill_$pass.txt" | tail -30
done
