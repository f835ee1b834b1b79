#!/usr/bin/env bash
# After the kernel cores, the baselines and the tracea.ops pieces became folders of one file each, and split-K's
# arrival at a tile became one writer (emitters/cuda/split_arrival.py): the quick CUDA suite through `tracea
# bench` (each op's device baseline now read from emitters/baselines/<op>.py), the GPU tests of the kernels, the
# launch path, the ops surface (torch.compile's custom ops from tracea_cli/ops/_torch/), export and attention on a
# fresh compile cache, and compute-sanitizer over the gemv cases (a cluster's splits, and 16 splits meeting in
# the global workspace: the kernel whose text the shared writer changed), and the Hopper TMA-store epilogue
# (its staging atoms' buffer named per atom, which took NVRTC 13.0's spill away). SAN_CASES picks the
# sanitizer's cases by word (default: gemv wgmma-tma). Two steps, each within one call:
#     STEP=kernels bash benchmarks/gpu/quick_suite_gpu_tests_split_sanitizer.sh
#     STEP=launch bash benchmarks/gpu/quick_suite_gpu_tests_split_sanitizer.sh
. benchmarks/gpu/gpu_run_env.sh   # TRACEA_HOME: a fresh folder unless one is given
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
case "${STEP:-kernels}" in
kernels)
  timeout 60 $PY -m tracea bench --backend cuda --quick 2>&1 | tail -20 | tee "$RES/quick_suite.txt"
  timeout 360 $PY -m pytest -q -p no:cacheprovider -rf -k "not recorded_gpu_probe" \
    tests/emitters/cuda/test_cuda_wgmma.py tests/emitters/cuda/test_cuda_splitk.py tests/emitters/cuda/test_cuda_compile.py \
    tests/emitters/cuda/test_cuda_gpu.py tests/ops/test_ops_gpu.py tests/emitters/cuda/test_cuda_wgmma_conv.py \
    tests/emitters/cuda/test_cuda_stem_gpu.py tests/emitters/cuda/test_cuda_gemv.py tests/emitters/cuda/test_simt_split_gpu.py \
    tests/emitters/cuda/test_split_arrival.py > "$RES/gpu_tests_kernels_and_ops.txt" 2>&1
  for tool in memcheck racecheck synccheck; do
    extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
    timeout 60 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
      $PY benchmarks/gpu/sanitize_cases.py ${SAN_CASES:-gemv wgmma-tma} --under-sanitizer > "$RES/sanitize_$tool.txt" 2>&1
    echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
      | tee -a "$RES/sanitize_summary.txt"
  done ;;
launch)
  timeout 560 $PY -m pytest -q -p no:cacheprovider -rf \
    tests/emitters/cuda/test_simt_core_gpu.py tests/emitters/cuda/test_cuda_attention_gpu.py \
    tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py tests/emitters/cuda/test_cuda_cluster_n_gpu.py \
    tests/emitters/test_attention_flex_gpu.py tests/emitters/test_nan_propagation_gpu.py tests/export/test_export_gpu.py \
    tests/ops/test_ops_compile_gpu.py tests/ops/test_ops_native_call.py tests/emitters/cuda/test_cuda_modules.py \
    > "$RES/gpu_tests_attention_export_launch.txt" 2>&1 ;;
esac
grep -hE "^FAILED|passed|failed" "$RES"/gpu_tests_*.txt 2>/dev/null | cut -c1-200
