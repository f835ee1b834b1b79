#!/usr/bin/env bash
# Where ResNet-50's batch-1 CUDA graph loses to cuDNN's, per convolution, and the host-side stream ordering's GPU
# tests, in one call: `tests/ops/test_ops_gpu.py`, the decode and compile GPU tests (the launches joined after
# Tracea's stream, downloads synchronised), then ResNet-50 with patch_conv2d at batches 1 and 32 with each
# convolution's kernels in both graphs side by side (ops_resnet50.py --layers), then the batch-1 3x3 and strided
# convolutions' im2col forms in graphs of ten beside cuDNN's (graph_kernel_probe.py --forms --threes).
# The first call of this script found the crash that graph_held.py mends and the layers behind
# few_pixels_im2col (docs/device-runs/h200-resnet-b1-layers/).
#     bash benchmarks/gpu/resnet_b1_layers_checks.sh
# Knobs: N (pytest workers, 4), TEST_FILES (in place of those), TESTS (more pytest files), SKIP_TESTS=1, FORMS= (no
# forms table), BATCH (ops_resnet50.py's batches, "1 32"), SAN_CASES (sanitize_cases.py's cases under memcheck,
# racecheck and synccheck), SUITE=1 (the resnet50 suite of `tracea bench --backend cuda`, every row verified).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 420 $PY -m pytest -q -p no:cacheprovider -rf -n ${N:-4} ${TEST_FILES:-tests/ops/test_ops_gpu.py \
    tests/ops/test_ops_compile_gpu.py tests/emitters/cuda/test_attention_decode_gpu.py} ${TESTS:-} \
    > "$RES/gpu_tests_stream_order.txt" 2>&1
  echo "tests rc=$?"; tail -5 "$RES/gpu_tests_stream_order.txt"
fi
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in ${SAN_CASES:+memcheck racecheck synccheck}; do
  extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
  timeout 150 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
    $PY benchmarks/gpu/sanitize_cases.py $SAN_CASES --under-sanitizer > "$RES/sanitize_$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
    | tee -a "$RES/sanitize_summary.txt"
done
timeout 300 $PY benchmarks/gpu/ops_resnet50.py --batch ${BATCH:-1 32} --layers 2>&1 | tee "$RES/resnet50_layers.txt" | tail -60
if [ -n "${FORMS-1}" ]; then
  timeout 400 $PY benchmarks/gpu/graph_kernel_probe.py --forms --threes 2>&1 | tee "$RES/threes_forms_in_graphs.txt" \
    | tail -90
fi
if [ -n "${SUITE:-}" ]; then
  COLUMNS=200 timeout 360 $PY -m tracea bench --backend cuda --suite resnet50 --metrics "$RES/suite_resnet50.jsonl" \
    > "$RES/suite_resnet50.txt" 2> "$RES/suite_resnet50.err"
  echo "suite rc=$?"; tail -60 "$RES/suite_resnet50.txt"
fi
true
