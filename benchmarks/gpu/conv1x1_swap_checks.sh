#!/usr/bin/env bash
# Swapped operands on the Hopper GEMM (WgmmaSchedule.swap: C^T's tiles, a few of C's rows each) on a GPU, in one
# call: its GPU tests and the 1x1 conv ones, compute-sanitizer (memcheck, racecheck, synccheck) over the swapped
# cases and the plain 1x1 conv, then ResNet-50's batch-1 1x1 convs of at most 784 pixels, the heuristic against
# swapped forms, in graphs of ten calls beside cuDNN's (graph_kernel_probe.py --forms --swap) and as `tracea bench`
# times them, L2 flushed (conv1x1_batch1_forms.py --swap); RESNET=1 adds ResNet-50 with patch_conv2d
# (ops_resnet50.py, batches 1 and 32, graphs timed in turns), SUITE=1 the resnet50 suite of `tracea bench --backend
# cuda` (batches 1 and 32, every row verified, then timed beside cuDNN).
#     bash benchmarks/gpu/conv1x1_swap_checks.sh
# Knobs: N (pytest workers), TESTS (more pytest files), FORMS= (no forms tables), RESNET=1, SUITE=1.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 300 $PY -m pytest -q -p no:cacheprovider -rf ${N:+-n $N} tests/emitters/cuda/test_cuda_wgmma_swap_gpu.py \
  tests/emitters/cuda/test_cuda_conv1x1.py ${TESTS:-} > "$RES/gpu_tests_swap.txt" 2>&1
tail -3 "$RES/gpu_tests_swap.txt"
for tool in memcheck racecheck synccheck; do
  extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
  timeout 120 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
    $PY benchmarks/gpu/sanitize_cases.py wgmma-conv1x1-swap wgmma-gemm-swap-split wgmma-conv1x1 --under-sanitizer \
    > "$RES/sanitize_swap_$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_swap_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
    | tee -a "$RES/sanitize_swap_summary.txt"
done
if [ -n "${FORMS-1}" ]; then
  timeout 240 $PY benchmarks/gpu/graph_kernel_probe.py --forms --swap 2>&1 | tee "$RES/swap_forms_in_graphs.txt" | tail -80
  timeout 240 $PY benchmarks/gpu/conv1x1_batch1_forms.py --swap 2>&1 | tee "$RES/swap_forms_bench.txt" | tail -150
fi
if [ -n "${RESNET:-}" ]; then
  timeout 300 $PY benchmarks/gpu/ops_resnet50.py --batch 1 32 2>&1 | tee "$RES/resnet50_swap.txt" | tail -30
fi
if [ -n "${SUITE:-}" ]; then
  COLUMNS=200 timeout 300 $PY -m tracea bench --backend cuda --suite resnet50 --metrics "$RES/suite_resnet50.jsonl" \
    > "$RES/suite_resnet50.txt" 2> "$RES/suite_resnet50.err"
  echo "suite rc=$?"; tail -60 "$RES/suite_resnet50.txt"
fi
true
