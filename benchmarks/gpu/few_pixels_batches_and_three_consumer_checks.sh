#!/usr/bin/env bash
# In one call: the GEMM-path conv form a tune recorded as CUDA_ERROR_ILLEGAL_INSTRUCTION and its neighbours, each in
# its own process (three_consumer_split_forms.py), compute-sanitizer memcheck over the first; the tracea.ops GPU
# tests (graph-held scratch let go after a compile measurement, scratch zeroed outside a capture); then the batch-4
# and batch-8 3x3 and strided convs, few_pixels_im2col's hero beside the one before it (graph_kernel_probe.py
# --forms --threes --batch N).
#     bash benchmarks/gpu/few_pixels_batches_and_three_consumer_checks.sh
# Knobs: N (pytest workers, 4), BATCHES ("4 8"), UNREFUSED=1 (run the three-consumer split-K forms that validate
# refuses since, three_consumer_split_forms.py --unrefused: the check of splitk._barrier's new id).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
for i in 0 1 2 3 4 5 6 7; do
  timeout 60 $PY benchmarks/gpu/three_consumer_split_forms.py $i ${UNREFUSED:+--unrefused} \
    >> "$RES/three_consumer_split_forms.txt" 2>&1
  echo "form $i rc=$?" >> "$RES/three_consumer_split_forms.txt"
done
grep -E "^  [0-9]|rc=" "$RES/three_consumer_split_forms.txt" | cut -c1-200
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 100 $SAN --tool memcheck --print-limit 10 $PY benchmarks/gpu/three_consumer_split_forms.py 0 --unrefused \
  > "$RES/sanitize_three_consumer_memcheck.txt" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|Illegal|illegal|Invalid" "$RES/sanitize_three_consumer_memcheck.txt" | head -5
timeout 150 $PY -m pytest -q -p no:cacheprovider -rf -n ${N:-4} tests/ops/test_ops_gpu.py \
  tests/ops/test_ops_compile_gpu.py tests/ops/test_ops_launch_on.py > "$RES/gpu_tests_ops.txt" 2>&1
echo "tests rc=$?"; tail -2 "$RES/gpu_tests_ops.txt"
for b in ${BATCHES:-4 8}; do
  timeout 110 $PY benchmarks/gpu/graph_kernel_probe.py --forms --threes --batch $b 2>&1 \
    | tee "$RES/threes_forms_batch$b.txt" | grep -E "^\|" | cut -c1-170
done
true
