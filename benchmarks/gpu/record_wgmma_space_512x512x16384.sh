#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the complete 512x512x16384 wgmma space recorded again after the split-K
# fix-up and the evict-first fields (837 candidates, hero first), for the tuner's replay tests.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 560 $PY benchmarks/gpu/record_space.py --op gemm --m 512 --n 512 --k 16384 --dtype bf16 \
    --variant cuda-wgmma.gemm --out "$RES/cuda_wgmma_h100_512x512x16384.json" --jobs 16 > "$RES/rec512.log" 2>&1
echo "rc=$?" >> "$RES/rec512.log"; head -2 "$RES/rec512.log"; tail -4 "$RES/rec512.log"
