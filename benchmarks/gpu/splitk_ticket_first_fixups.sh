#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the split-K fix-ups after the 512x512x16384 timelines. "last" now
# takes its ticket first (the tile's last unit does not park, sums its own slice from registers, loads
# three slices at once); the TMA-store drain waits for the reads only; the cluster fix-up arrives once a
# block. The Hopper GPU tests, the timelines, every split hero against its cluster form.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 420 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py tests/emitters/cuda/test_cuda_wgmma.py \
    tests/emitters/cuda/test_cuda_cluster_n_gpu.py tests/emitters/cuda/test_cuda_conv1x1.py tests/emitters/cuda/test_cuda_gpu.py > "$RES/pytest.txt" 2>&1
echo "rc=$?" >> "$RES/pytest.txt"; tail -15 "$RES/pytest.txt"
mkdir -p "$RES/stamps"
timeout 200 $PY benchmarks/gpu/split_timeline.py --out "$RES/stamps" > "$RES/timeline.txt" 2>&1
echo "rc=$?" >> "$RES/timeline.txt"; grep -v "^    cycles\|^    entry" "$RES/timeline.txt"
timeout 300 $PY benchmarks/gpu/split_probe.py --cluster > "$RES/cluster.txt" 2>&1
echo "rc=$?" >> "$RES/cluster.txt"; cat "$RES/cluster.txt"
