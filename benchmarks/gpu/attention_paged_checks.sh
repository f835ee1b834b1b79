#!/usr/bin/env bash
# Paged and ragged decode attention (issue 33) on a GPU, in one call: the decode GPU tests (its serving cases:
# lengths per entry, pages of 16/24/64 keys shuffled in the pool, a bad table refused before the launch,
# tracea.ops on a paged cache with new lengths at each call and in a CUDA graph), the mma.sync attention GPU
# tests and tracea.ops' GPU tests (the host objects' argument packing and per-input dtypes), compute-sanitizer
# (memcheck, racecheck, synccheck) over the decode and paged cases, then the paged table
# (benchmarks/gpu/attention_paged.py) and the decode table (benchmarks/gpu/attention_decode.py).
#     bash benchmarks/gpu/attention_paged_checks.sh
# Knobs: TESTS (pytest files), K (a -k expression), SAN_CASES (sanitize_cases.py names), SWEEP=--split-sweep,
# PAGED_ARGS (e.g. --rows 1), PAGED= (no paged table), DECODE= (no decode table), DECODE_ROWS=all (every decode row), N (pytest
# workers), TEST_TIMEOUT (seconds, 240), PREFILL (arguments of wgmma_attention_probe.py: the Hopper prefill
# kernel's cases, e.g. "--match window --sweep"), SPACE (arguments of attention_decode_space.py).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
TESTS=${TESTS:-tests/emitters/cuda/test_attention_decode_gpu.py tests/emitters/cuda/test_attention_decode.py \
  tests/emitters/cuda/test_cuda_attention_gpu.py tests/ops/test_ops_gpu.py}
timeout ${TEST_TIMEOUT:-240} $PY -m pytest -q -p no:cacheprovider -rf ${N:+-n $N} ${K:+-k "$K"} $TESTS > "$RES/gpu_tests_paged.txt" 2>&1
tail -4 "$RES/gpu_tests_paged.txt"
for tool in memcheck racecheck synccheck; do
  extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
  timeout 90 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
    $PY benchmarks/gpu/sanitize_cases.py ${SAN_CASES:-attention-decode attention-paged attention-ragged} --under-sanitizer \
    > "$RES/sanitize_paged_$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_paged_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
    | tee -a "$RES/sanitize_paged_summary.txt"
done
[ -n "${PAGED-1}" ] && timeout 300 $PY benchmarks/gpu/attention_paged.py --repeats ${REPEATS:-20} ${SWEEP:-} ${PAGED_ARGS:-} 2>&1 | tee "$RES/paged_table.txt" | tail -22
[ -n "${DECODE-1}" ] && timeout 200 $PY benchmarks/gpu/attention_decode.py --rows ${DECODE_ROWS:-decode} --repeats ${REPEATS:-20} 2>&1 \
  | tee "$RES/decode_table.txt" | tail -16
[ -n "${PREFILL:-}" ] && timeout 240 $PY benchmarks/gpu/wgmma_attention_probe.py $PREFILL 2>&1 | tee "$RES/prefill_probe.txt" | tail -40
[ -n "${SPACE:-}" ] && timeout 200 $PY benchmarks/gpu/attention_decode_space.py $SPACE 2>&1 | tee "$RES/decode_space.txt" | tail -40
true
