#!/usr/bin/env bash
# The Hopper 8-bit GEMM with scales (issue 35) on one sm_90 GPU, in one call:
# 1. every mode verified (benchmarks/gpu/scaled_gemm_gpu.py --part check) and the GPU tests,
# 2. compute-sanitizer (memcheck, racecheck, synccheck) over the small cases,
# 3. the llm-gemm rows in FP8 (row scales) beside torch._scaled_mm, 4. per-tensor scales, 5. int8 beside torch._int_mm,
# 6. block128 beside torch's block-scaled _scaled_mm (and bf16 cuBLAS, per-tensor FP8), 7. rows outside the suites,
# 8. `tracea bench --suite llm-gemm-fp8` and `--suite llm-gemm-int8` as a user types them, 9. Nsight Compute over one
# launch of the FP8 hero and of the bf16 GEMM's on PROFILE_SHAPE (2048 4096 4096), 10. tracea.ops' host time a call
# beside torch._scaled_mm and the ops and export GPU tests of the scaled GEMM, 11. the FP8 rows without and with the
# overlap of a tile's stores with the next tile's first k step (scaled_gemm.AHEAD; --ahead 0 and 1).
#     bash benchmarks/gpu/scaled_gemm_checks.sh
# Knobs: PARTS ("1 2 3"), SWEEP (set: --sweep), AHEAD
# (0 or 1: --ahead for the check, the sanitizers and the rows), AHEAD_ROWS (part 11's row set: fp8), MATCH (""), ROWS_S (seconds a rows part may take: 150), PYTEST_K
# (none), PROFILE_SHAPE, PROFILE_VENDOR ("--vendor": cuBLASLt's kernel profiled too). The calls of docs/device-runs/h200-fp8-int8-gemm/ (its README) set these per call.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$RES/device.txt"
rows() {  # rows WHICH FILE
  timeout ${ROWS_S:-150} $PY benchmarks/gpu/scaled_gemm_gpu.py --part rows --rows $1 ${SWEEP:+--sweep} ${AHEAD:+--ahead $AHEAD} \
    --match "${MATCH:-}" --budget $(( ${ROWS_S:-150} - 25 )) > "$RES/$2" 2>&1
  echo "$1 rc=$?"; cut -c1-175 "$RES/$2" | grep -vE "^\s*$" | tail -40
}
for part in ${PARTS:-1 2 3}; do
  case $part in
  1)
    timeout 200 $PY benchmarks/gpu/scaled_gemm_gpu.py --part check ${AHEAD:+--ahead $AHEAD} > "$RES/check.txt" 2>&1
    echo "check rc=$?"; grep -E "WRONG|BUILD|check:" "$RES/check.txt" | cut -c1-220
    timeout 120 $PY -m pytest -q -p no:cacheprovider -n 8 tests/emitters/cuda/test_cuda_wgmma_scaled_gpu.py \
      ${PYTEST_K:+-k "$PYTEST_K"} > "$RES/gpu_tests.txt" 2>&1
    echo "tests rc=$?"; tail -3 "$RES/gpu_tests.txt" | cut -c1-300 ;;
  2)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck synccheck; do
      timeout 100 $SAN --tool $tool --report-api-errors no --print-limit 10 --error-exitcode 99 \
        $PY benchmarks/gpu/scaled_gemm_gpu.py --part check --small ${AHEAD:+--ahead $AHEAD} > "$RES/sanitize_$tool.txt" 2>&1
      echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|WRONG|check:' "$RES/sanitize_$tool.txt" | tr '\n' ' ')"
    done ;;
  3) rows fp8 rows_fp8.txt ;;
  4) MATCH=${TENSOR_MATCH:-${MATCH:-}} rows fp8-tensor rows_fp8_tensor.txt ;;
  5) rows int8 rows_int8.txt ;;
  6) rows block rows_block.txt ;;
  7) rows edge rows_edge.txt ;;
  9)
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    # every launch of the FP8 kernel, the bf16 GEMM's and (with PROFILE_VENDOR=--vendor) cuBLASLt's nvjet kernel
    timeout 240 $NCU --clock-control none -k regex:"tr_wgmma_gemm|nvjet|gemm" --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section LaunchStats --section Occupancy --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
      $PY benchmarks/gpu/scaled_gemm_profile.py ${PROFILE_SHAPE:-2048 4096 4096} ${PROFILE_VENDOR:-} \
      > "$RES/ncu_profile.txt" 2>&1
    echo "ncu rc=$?"; grep -E "profiled|rel err|Duration|Throughput|Pipe|Stall|Bank|Issue Slots|Executed Ipc|L2 Hit|Cluster|Grid Size|Block Size|Registers|Shared Memory Config" \
      "$RES/ncu_profile.txt" | cut -c1-150 | head -60 ;;
  10)  # the user's side: tracea.ops' host time a call (and its prepared launch), exported CUDA packages
    timeout 90 $PY benchmarks/bench_ops_host.py --cuda --calls 100 --blocks 11 > "$RES/ops_host.txt" 2>&1
    echo "ops host rc=$?"; grep -E "scaled_gemm|gemm fp16" "$RES/ops_host.txt" | cut -c1-220
    timeout 120 $PY -m pytest -q -p no:cacheprovider -n 4 tests/emitters/cuda/test_cuda_wgmma_scaled_gpu.py \
      tests/export/test_export_gpu.py -k "tracea_ops or (package and scaled)" -rA > "$RES/ops_export_tests.txt" 2>&1
    echo "ops/export tests rc=$?"; tail -3 "$RES/ops_export_tests.txt" | cut -c1-300 ;;
  11)  # the FP8 tiles without (--ahead 0) and with the overlap of a tile's stores with the next tile's first step
    for a in 0 1; do
      timeout ${ROWS_S:-90} $PY benchmarks/gpu/scaled_gemm_gpu.py --part rows --rows ${AHEAD_ROWS:-fp8} --ahead $a --match "${MATCH:-}" \
        --budget $(( ${ROWS_S:-90} - 25 )) > "$RES/rows_ahead$a.txt" 2>&1
      echo "ahead $a rc=$?"; cut -c1-130 "$RES/rows_ahead$a.txt" | grep -vE "^\s*$|vendor:"
    done ;;
  8)
    for suite in llm-gemm-fp8 llm-gemm-int8; do
      COLUMNS=240 timeout 240 $PY -m tracea bench --suite $suite --backend cuda > "$RES/suite_$suite.txt" 2>&1
      echo "$suite rc=$?"; grep -E "scaled_gemm|geometric" "$RES/suite_$suite.txt" | cut -c1-200
    done ;;
  esac
done
true
