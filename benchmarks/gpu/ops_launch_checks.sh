#!/usr/bin/env bash
# Issue 31 on one GPU: tracea.ops' prepared launches (host time per call beside PyTorch's, ops against `tracea
# bench`'s timing of the same kernel and against PyTorch), torchvision ResNet-50 with patch_conv2d (eager and
# CUDA graphs, batch 32 and 1), then the GPU tests of what the launch path touches. Few files in $OUT.
#     STEP=bench|tests|all bash benchmarks/gpu/ops_launch_checks.sh
. benchmarks/gpu/gpu_run_env.sh
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"; } | tee "$RES/device.txt"
STEP=${STEP:-all}
if [ $STEP != tests ]; then
  for cmd in "benchmarks/bench_ops_host.py --cuda" "benchmarks/gpu/ops_vs_bench.py" \
             "benchmarks/gpu/ops_resnet50.py --batch 32 1" ${EXTRA_BENCH:-}; do
    echo "=== $cmd" >> "$RES/bench.txt"
    timeout ${BENCH_TIMEOUT:-200} $PY $cmd >> "$RES/bench.txt" 2>&1
    echo "rc=$?" >> "$RES/bench.txt"
  done
  grep -vE "Warning|warn\(" "$RES/bench.txt" | tail -${TAIL:-80}
fi
[ $STEP = bench ] && exit 0
timeout ${TEST_TIMEOUT:-400} $PY -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short ${TESTS:-tests/ops/test_ops_gpu.py \
  tests/ops/test_ops_launch_on.py tests/emitters/cuda/test_cuda_gpu.py tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py tests/ops/test_ops_compile_gpu.py} \
  > "$RES/tests.txt" 2>&1
echo "rc=$?" >> "$RES/tests.txt"
grep -E "passed|failed|^FAILED|^ERROR|rc=" "$RES/tests.txt" | tail -30
