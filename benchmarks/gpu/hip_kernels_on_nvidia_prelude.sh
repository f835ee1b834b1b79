#!/usr/bin/env bash
# One H100 call for issue 19 (2026-11-26): every HIP kernel's logic through the NVIDIA prelude (GEMM in bf16,
# fp16 and fp32, every epilogue, both operand layouts, the backend's heuristic schedules; conv with and
# without bias; softmax), then the CUDA path after the registry change (default backend, one verified bench).
. benchmarks/gpu/gpu_run_env.sh
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  $PY -c "import cupy, torch; print('cupy', cupy.__version__, 'torch', torch.__version__)"; } | tee "$RES/device.txt"
timeout 420 $PY -m pytest -q -m gpu -p no:cacheprovider -rs --durations=5 tests/emitters/hip/test_hip_gpu.py \
    > "$RES/test_hip_gpu.txt" 2>&1; echo "rc=$?" >> "$RES/test_hip_gpu.txt"; tail -15 "$RES/test_hip_gpu.txt"
timeout 120 $PY -m tracea bench gemm --m 4096 --dtype bf16 --repeat 20 > "$RES/bench_default.txt" 2>&1
echo "rc=$?" >> "$RES/bench_default.txt"; cat "$RES/bench_default.txt"
