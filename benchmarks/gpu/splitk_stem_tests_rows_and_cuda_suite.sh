#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): after the review fixes (release adds publish the parked partials, the stem
# split within 99 KB): the split-K, pair, stem and harness GPU tests, the table and held-out shapes, and
# the whole CUDA suite.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 240 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py tests/emitters/cuda/test_cuda_cluster_n_gpu.py \
    tests/emitters/cuda/test_cuda_stem_gpu.py tests/emitters/cuda/test_cuda_wgmma.py tests/emitters/cuda/test_cuda_conv1x1.py > "$RES/pytest.txt" 2>&1
echo "rc=$?" >> "$RES/pytest.txt"; grep -E "passed|failed|FAILED" "$RES/pytest.txt" | tail -8
timeout 200 $PY benchmarks/gpu/split_probe.py --rows > "$RES/rows.txt" 2>&1; echo "rc=$?" >> "$RES/rows.txt"
grep -A1 "^gemm\|^conv\|^softmax" "$RES/rows.txt" | grep -v "^--" | paste - - | awk '{print $1, $(NF-1), $NF}' | cut -c1-120
ARGS=(--backend cuda --metrics "$RES/suite.jsonl")
COLUMNS=200 timeout 300 $PY -m tracea bench "${ARGS[@]}" > "$RES/suite.txt" 2> "$RES/suite.err"
echo "rc=$?" >> "$RES/suite.txt"; tail -8 "$RES/suite.txt"
