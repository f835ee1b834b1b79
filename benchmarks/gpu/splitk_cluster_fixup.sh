#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the cluster split-K fix-up (a tile's slices are one cluster summing
# over distributed shared memory). Its GPU tests with every split form, the 512x512x16384 timelines against
# the last-block fix-up, then every split hero against its cluster form.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 240 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py > "$RES/splitk_pytest.txt" 2>&1
echo "rc=$?" >> "$RES/splitk_pytest.txt"; tail -15 "$RES/splitk_pytest.txt"
mkdir -p "$RES/stamps"
timeout 200 $PY benchmarks/gpu/split_timeline.py --out "$RES/stamps" > "$RES/timeline.txt" 2>&1
echo "rc=$?" >> "$RES/timeline.txt"; cat "$RES/timeline.txt"
timeout 300 $PY benchmarks/gpu/split_probe.py --cluster > "$RES/cluster.txt" 2>&1
echo "rc=$?" >> "$RES/cluster.txt"; cat "$RES/cluster.txt"
