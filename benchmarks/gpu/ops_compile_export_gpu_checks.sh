#!/usr/bin/env bash
# tracea.ops, torch.compile(backend="tracea") and `tracea export` (issue 18) on one GPU: their GPU tests (one
# log, tests.txt), then the ops benchmarks: ResNet-50 convs with patch_conv2d in NCHW and channels_last (each
# distinct conv alone with --layers), and the Llama MLP through torch.compile. Few files in $OUT (the device
# tool returns at most 8).
#     TESTS="tests/ops/test_ops_gpu.py" BENCH=0 bash benchmarks/gpu/ops_compile_export_gpu_checks.sh
. benchmarks/gpu/gpu_run_env.sh
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  $PY -c "import torch; print('torch', torch.__version__)"; } | tee "$RES/device.txt"
for t in ${TESTS:-tests/ops/test_ops_gpu.py tests/ops/test_ops_launch_on.py tests/export/test_export_gpu.py tests/ops/test_ops_compile_gpu.py}; do
  echo "=== $t" >> "$RES/tests.txt"
  timeout ${TEST_TIMEOUT:-240} $PY -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short $t >> "$RES/tests.txt" 2>&1
  echo "rc=$?" >> "$RES/tests.txt"
done
grep -E "^===|passed|failed|^FAILED|^ERROR|rc=" "$RES/tests.txt"
[ "${BENCH:-1}" = 1 ] || exit 0
run() {  # name, script, args...: stdout and stderr in one log
  local name=$1; shift
  echo "=== $*" >> "$RES/bench.txt"
  timeout ${BENCH_TIMEOUT:-240} $PY "$@" >> "$RES/bench.txt" 2>&1
  echo "rc=$?" >> "$RES/bench.txt"
}
run resnet benchmarks/gpu/ops_patch_resnet.py --batch 32 --dtype fp16 ${RESNET_ARGS:-}
run resnet_cl benchmarks/gpu/ops_patch_resnet.py --batch 32 --dtype fp16 --channels-last ${RESNET_ARGS:-}
run mlp benchmarks/gpu/ops_compile_mlp.py
run mlp_graphs benchmarks/gpu/ops_compile_mlp.py --cudagraphs
grep -vE "Warning|warn\(" "$RES/bench.txt" | tail -${TAIL:-150}
