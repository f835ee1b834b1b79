#!/usr/bin/env bash
# One H100 call (2026-11-26): the HIP kernels' logic after A's 16-byte loads (issue 19); Nsight Compute on
# attention d256 b16 s512 beside cuDNN (issue 17: what limits the hero there).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 300 $PY -m pytest -q -m gpu -p no:cacheprovider -rs tests/emitters/hip/test_hip_gpu.py \
    > "$RES/test_hip_gpu.txt" 2>&1; echo "rc=$?" >> "$RES/test_hip_gpu.txt"; tail -4 "$RES/test_hip_gpu.txt"
timeout 240 ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --launch-count 6 \
    $PY benchmarks/gpu/attention_ncu.py --case 16,32,512,256 > "$RES/attn_d256_ncu.txt" 2>&1
echo "rc=$?" >> "$RES/attn_d256_ncu.txt"
grep -E "==PROF==|^  [a-z_]|Duration|Throughput|Stall|Warp Cycles|Issued|Eligible|Achieved Occupancy|Registers|Block Size|Grid Size|verified|baseline" \
    "$RES/attn_d256_ncu.txt" | head -150
