#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the fp32 SIMT hero's lane-filled rule (odd rows, one-wave 64x128 grid,
# K <= 2048): the SIMT GPU tests, the heroes on odd shapes, then the table as a user runs it.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_simt_core_gpu.py tests/emitters/cuda/test_simt_split_gpu.py \
    > "$RES/test_simt.txt" 2>&1; echo "rc=$?" >> "$RES/test_simt.txt"; tail -3 "$RES/test_simt.txt"
timeout 120 $PY benchmarks/gpu/simt_odd.py --shapes 1000x999x1001,999x1023x513,997x1021x777,1020x900x2047,1024x1024x1001,777x1333x555 \
    > "$RES/heroes.txt" 2>&1; echo "rc=$?" >> "$RES/heroes.txt"; cat "$RES/heroes.txt"
timeout 200 $PY benchmarks/gpu/split_probe.py --rows > "$RES/rows.txt" 2>&1; echo "rc=$?" >> "$RES/rows.txt"; cat "$RES/rows.txt"
