#!/usr/bin/env bash
# The TMA-fed decode GEMM (issue 34) on one Hopper GPU, in one call:
# 1. GPU tests of both gemv cores (verified against float64 references), 2. compute-sanitizer (memcheck, racecheck,
# synccheck) over every reduction form, 3. the decode rows with a sweep of rings and splits beside the register gemv
# and cuBLAS, 4. `tracea bench --suite llm-gemm --backend cuda` (every row, the bandwidth column), 5. rows outside the
# suites (other N x K, M = 1-32), 6. tracea.ops beside F.linear under two ways of emptying the L2, and as a model's
# layers in sequence.
#     bash benchmarks/gpu/decode_gemm_checks.sh
# Knobs: PARTS ("1 2 3 4 5"), SWEEP (--sweep), MATCH (""), MS (""), SPLITS (""), ROWS (suite), ROWS_S (200), TESTS
# (both gemv test files), PYTEST_K (none). The calls of docs/device-runs/h200-decode-gemm-tma/ (its README):
#   1: as is;  2: PARTS="1 2 6 4 3" SWEEP= ROWS=all ROWS_S=100 TESTS=tests/emitters/cuda/test_cuda_gemv_tma.py;
#   3: PARTS=3 SWEEP= ROWS=held MS=8,32 ROWS_S=170;
#   4: PARTS="1 2 3" SWEEP= ROWS=held MS=32,24 ROWS_S=150 TESTS="tests/emitters/cuda/test_cuda_gemv_tma.py
#      tests/export/test_export_gpu.py" PYTEST_K="gpu_ or decode";
#   5: PARTS=3 SWEEP= ROWS=wide SPLITS=1,2,3,4,6,8 ROWS_S=240.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
for part in ${PARTS:-1 2 3 4 5}; do
  case $part in
  1)
    timeout 130 $PY -m pytest -q -p no:cacheprovider -n 8 ${TESTS:-tests/emitters/cuda/test_cuda_gemv_tma.py \
      tests/emitters/cuda/test_cuda_gemv.py} ${PYTEST_K:+-k "$PYTEST_K"} > "$RES/gpu_tests.txt" 2>&1
    echo "tests rc=$?"; tail -4 "$RES/gpu_tests.txt" | cut -c1-300 ;;
  2)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck synccheck; do
      timeout 45 $SAN --tool $tool --report-api-errors no --print-limit 10 --error-exitcode 99 \
        $PY benchmarks/gpu/gemv_tma_sanitize.py > "$RES/sanitize_$tool.txt" 2>&1
      echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|WRONG' "$RES/sanitize_$tool.txt" | tr '\n' ' ')"
    done ;;
  3)
    timeout ${ROWS_S:-200} $PY benchmarks/gpu/decode_gemm.py --rows ${ROWS:-suite} ${SWEEP---sweep} --match "${MATCH:-}" --ms "${MS:-}" --splits "${SPLITS:-}" \
      --budget $(( ${ROWS_S:-200} - 30 )) > "$RES/decode_rows.txt" 2>&1
    echo "rows rc=$?"; grep -E "planned|register|copy" "$RES/decode_rows.txt" | cut -c1-160 ;;
  4)
    COLUMNS=240 timeout 120 $PY -m tracea bench --suite llm-gemm --backend cuda > "$RES/suite_llm_gemm.txt" 2>&1
    echo "suite rc=$?"; grep -E "llm-gemm|geometric|copy" "$RES/suite_llm_gemm.txt" | cut -c1-200 ;;
  5)
    timeout 90 $PY benchmarks/gpu/decode_gemm.py --rows held --budget 70 > "$RES/decode_held.txt" 2>&1
    echo "held rc=$?"; grep -E "planned|register" "$RES/decode_held.txt" | cut -c1-160 ;;
  6)
    timeout 90 $PY benchmarks/gpu/decode_gemm_ops.py > "$RES/decode_ops.txt" 2>&1
    echo "ops rc=$?"; cat "$RES/decode_ops.txt" | cut -c1-200 ;;
  esac
done
true
