#!/usr/bin/env bash
# FP8 outputs of the Hopper scaled GEMM (issue 35: emitters/cuda/hopper/fp8_out.py) on one sm_90 GPU, in one call:
# 1. the FP8-C cases verified (C and amax, a saturating seed) and the GPU tests of the FP8 C, the FP8 decode through
#    tracea.ops and the other tracea.ops tests of the scaled GEMM, 2. compute-sanitizer (memcheck, racecheck,
#    synccheck) over the small FP8-C cases, 3. the fp8-out rows (e4m3 -> e4m3, per tensor) beside torch._scaled_mm
#    with scale_result (cuBLASLt's D scale, no amax) and the unfused path with torch.amax, 4. `tracea bench
#    scaled_gemm --out-dtype fp8e4m3` as a user types it.
#     PARTS="1 2 3 4" bash benchmarks/gpu/fp8_out_gpu.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$RES/device.txt"
for part in ${PARTS:-1 2 3 4}; do
  case $part in
  1)
    timeout 150 $PY benchmarks/gpu/scaled_gemm_gpu.py --part check --cases fp8-out > "$RES/check_fp8_out.txt" 2>&1
    echo "check rc=$?"; grep -E "WRONG|BUILD|check:" "$RES/check_fp8_out.txt" | cut -c1-220
    timeout 150 $PY -m pytest -q -p no:cacheprovider -n 8 tests/emitters/cuda/test_cuda_wgmma_scaled_gpu.py \
      -k "fp8_output or tracea_ops or tma_gemv" -rA > "$RES/gpu_tests.txt" 2>&1
    echo "tests rc=$?"; grep -E "^(PASSED|FAILED|ERROR)" "$RES/gpu_tests.txt" | cut -c1-200; tail -2 "$RES/gpu_tests.txt" | cut -c1-300 ;;
  2)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in memcheck racecheck synccheck; do
      timeout 100 $SAN --tool $tool --report-api-errors no --print-limit 10 --error-exitcode 99 \
        $PY benchmarks/gpu/scaled_gemm_gpu.py --part check --small --cases fp8-out > "$RES/sanitize_$tool.txt" 2>&1
      echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|WRONG|check:' "$RES/sanitize_$tool.txt" | tr '\n' ' ')"
    done ;;
  3)
    timeout ${ROWS_S:-150} $PY benchmarks/gpu/scaled_gemm_gpu.py --part rows --rows fp8-out --budget $(( ${ROWS_S:-150} - 20 )) \
      > "$RES/rows_fp8_out.txt" 2>&1
    echo "rows rc=$?"; cut -c1-200 "$RES/rows_fp8_out.txt" | grep -vE "^\s*$" | tail -40 ;;
  4)
    COLUMNS=240 timeout 90 $PY -m tracea bench scaled_gemm --m 4096 --dtype fp8e4m3 --out-dtype fp8e4m3 \
      --scale tensor --backend cuda > "$RES/bench_cli.txt" 2>&1
    echo "cli rc=$?"; cut -c1-240 "$RES/bench_cli.txt" | tail -25 ;;
  esac
done
