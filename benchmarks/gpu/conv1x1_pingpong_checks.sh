#!/usr/bin/env bash
# The 1x1 conv's heroes after conv_heroes.pingpong_1x1 (issue 34) on one sm_90 GPU, in one call: the 1x1 conv's and
# swapped operands' GPU tests, compute-sanitizer (memcheck, racecheck, synccheck) over the ping-pong heroes' cases
# and the 1x1 ones (one log), then `tracea bench --suite resnet50 --backend cuda` (every row verified, then timed
# beside cuDNN); PARTS picks some: tests sanitize suite.
#     bash benchmarks/gpu/conv1x1_pingpong_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
PARTS=${PARTS:-tests sanitize suite}
if [[ " $PARTS " == *" tests "* ]]; then
  timeout 240 $PY -m pytest -q -p no:cacheprovider -rf -n 8 tests/emitters/cuda/test_cuda_conv1x1.py \
    tests/emitters/cuda/test_cuda_wgmma_swap_gpu.py > "$RES/gpu_tests.txt" 2>&1
  echo "tests rc=$?"; tail -3 "$RES/gpu_tests.txt"
fi
if [[ " $PARTS " == *" sanitize "* ]]; then
  for tool in memcheck racecheck synccheck; do
    extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
    echo "=== $tool" >> "$RES/sanitize.txt"
    timeout 150 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
      $PY benchmarks/gpu/sanitize_cases.py wgmma-conv1x1-pp64 wgmma-conv1x1-pp128 wgmma-conv1x1 wgmma-conv1x1-swap \
      --under-sanitizer >> "$RES/sanitize.txt" 2>&1
    echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize.txt" | tail -1)"
  done
  grep -E " ok$| WRONG$" "$RES/sanitize.txt" | sort | uniq -c
fi
if [[ " $PARTS " == *" suite "* ]]; then
  COLUMNS=200 timeout 240 $PY -m tracea bench --backend cuda --suite resnet50 --metrics "$RES/suite_resnet50.jsonl" \
    > "$RES/suite_resnet50.txt" 2> "$RES/suite_resnet50.err"
  echo "suite rc=$?"; grep -E "1x1|geometric" "$RES/suite_resnet50.txt" | cut -c1-150
fi
true
