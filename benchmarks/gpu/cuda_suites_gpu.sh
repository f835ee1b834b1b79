#!/usr/bin/env bash
# The CUDA suites of `tracea bench` (issue 16) on one NVIDIA GPU, heuristic schedules (a fresh TRACEA_HOME:
# nothing tuned), every row verified before it is timed beside PyTorch (cuBLAS, cuDNN, torch.softmax).
# Installs nothing: `tracea` is imported from this checkout through benchmarks/gpu/shim.sh. Logs in $OUT.
#
#     bash benchmarks/gpu/cuda_suites_gpu.sh [SUITE]      # SUITE: llm-gemm, resnet50 or softmax; default all
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
ARGS=(--backend cuda --metrics "$RES/suite.jsonl")
[ $# -gt 0 ] && ARGS+=(--suite "$1")
COLUMNS=200 timeout 580 $PY -m tracea bench "${ARGS[@]}" > "$RES/suite.txt" 2> "$RES/suite.err"
echo "rc=$?" >> "$RES/suite.txt"
cat "$RES/suite.txt"; tail -5 "$RES/suite.err"
