#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the last-unit fix-up with the TMA store back, the loads of up to 8
# accumulator groups of three slices at once; 128x64 two-consumer forms and the spread fix-up beside the
# hero on 512x512x16384 (twice, for the spread of the figures); the split-K GPU tests.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py tests/emitters/cuda/test_cuda_cluster_n_gpu.py \
    > "$RES/pytest.txt" 2>&1; echo "rc=$?" >> "$RES/pytest.txt"; tail -3 "$RES/pytest.txt"
mkdir -p "$RES/stamps"
timeout 250 $PY benchmarks/gpu/split_timeline.py --only hero,s8,128x64,spread --out "$RES/stamps" > "$RES/timeline.txt" 2>&1
echo "rc=$?" >> "$RES/timeline.txt"; grep -v "SM clock\|first stage ->\|entry -> exit\|    entry \|first stage  " "$RES/timeline.txt"
timeout 120 $PY benchmarks/gpu/split_timeline.py --only hero,s8,128x64,spread --no-timeline > "$RES/again.txt" 2>&1
cat "$RES/again.txt"
