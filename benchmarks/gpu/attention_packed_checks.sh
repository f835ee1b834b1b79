#!/usr/bin/env bash
# Packed variable-length prefill on the Hopper attention kernel (issue 33) on a GPU, in one call: its GPU tests
# (tests/emitters/cuda/test_cuda_wgmma_attention_packed_gpu.py) and the plain wgmma attention GPU tests (the
# producer, consumers and store it shares), compute-sanitizer (memcheck, racecheck, synccheck) over the packed
# cases (and SAN_CASES), then the packed table (benchmarks/gpu/attention_packed.py).
#     bash benchmarks/gpu/attention_packed_checks.sh
# Knobs: TESTS (pytest files), K (a -k expression), SAN_CASES (sanitize_cases.py names), PACKED_ARGS
# (e.g. --rows 2), REPEATS.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
TESTS=${TESTS:-tests/emitters/cuda/test_cuda_wgmma_attention_packed_gpu.py tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py}
timeout 300 $PY -m pytest -q -p no:cacheprovider -rf -x ${K:+-k "$K"} $TESTS > "$RES/gpu_tests_packed.txt" 2>&1
tail -4 "$RES/gpu_tests_packed.txt"
for tool in memcheck racecheck synccheck; do
  extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
  timeout 120 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
    $PY benchmarks/gpu/sanitize_cases.py ${SAN_CASES:-attention-packed attention-packed-d80} --under-sanitizer \
    > "$RES/sanitize_packed_$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_packed_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
    | tee -a "$RES/sanitize_packed_summary.txt"
done
timeout 300 $PY benchmarks/gpu/attention_packed.py --repeats ${REPEATS:-30} ${PACKED_ARGS:-} 2>&1 | tee "$RES/packed_table.txt" | tail -12
