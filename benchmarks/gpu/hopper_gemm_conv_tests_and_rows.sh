#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): after the split-K fix-up and evict-first heroes, every GPU test file
# that runs a Hopper GEMM or conv (split-K, the harness, multicast pairs, 1x1 convs, the CUDA backend,
# export, tracea.ops on torch tensors), then the table and the held-out shapes as a user runs them.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 330 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py tests/emitters/cuda/test_cuda_wgmma.py \
    tests/emitters/cuda/test_cuda_cluster_n_gpu.py tests/emitters/cuda/test_cuda_conv1x1.py tests/emitters/cuda/test_cuda_gpu.py tests/export/test_export_gpu.py \
    tests/ops/test_ops_gpu.py > "$RES/pytest.txt" 2>&1
echo "rc=$?" >> "$RES/pytest.txt"; grep -E "passed|failed|FAILED|Error" "$RES/pytest.txt" | tail -12
timeout 240 $PY benchmarks/gpu/split_probe.py --rows > "$RES/rows.txt" 2>&1; echo "rc=$?" >> "$RES/rows.txt"
cat "$RES/rows.txt"
