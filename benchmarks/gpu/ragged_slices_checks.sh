#!/usr/bin/env bash
# Issue 33's ragged decode rows: an uneven batch's entries each take the launch's slices, as many as keep
# RAGGED_SLICE_KEYS keys a slice (attention_decode.split_rule), and a paged cache with lengths and pages under 128
# keys takes 4 warps of 64-key tiles at head dim 128 (attention_decode.hero_schedule). Three parts, one call each:
#     PART=tests bash benchmarks/gpu/ragged_slices_checks.sh   # decode GPU tests, compute-sanitizer, the paged table
#     PART=space bash benchmarks/gpu/ragged_slices_checks.sh   # the rule's constant on uneven rows (RULES)
#     PART=final bash benchmarks/gpu/ragged_slices_checks.sh   # the paged table, the paged rows' tiles, the GPU tests
# Knobs: ROWS (attention_decode_space.py rows, "9,10,11,12,13,14,15,16,17"), SPLITS (fixed slices beside, e.g.
# "4,8"), RULES (attention_decode_space.py flags, one run each: "--slice-keys=0 --slice-keys=1024"), N (pytest
# workers), PAGED_TIMEOUT (seconds for attention_paged.py, 240).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
decode_tests() {
  timeout ${1:-150} $PY -m pytest -q -p no:cacheprovider -rf -n ${N:-8} tests/emitters/cuda/test_attention_decode_gpu.py \
    > "$RES/gpu_tests_decode.txt" 2>&1
  echo "tests rc=$?"; tail -2 "$RES/gpu_tests_decode.txt"
}
paged_table() {
  timeout ${PAGED_TIMEOUT:-240} $PY benchmarks/gpu/attention_paged.py --repeats 20 2>&1 | tee "$RES/paged_table.txt" | tail -22
}
case "${PART:-tests}" in
tests)
  decode_tests
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in memcheck racecheck synccheck; do
    timeout 80 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 \
      $PY benchmarks/gpu/sanitize_cases.py attention-ragged-d128 attention-ragged --under-sanitizer \
      > "$RES/sanitize_ragged_$tool.txt" 2>&1
    echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_ragged_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
      | tee -a "$RES/sanitize_ragged_summary.txt"
  done
  paged_table ;;
space)
  for rule in ${RULES:---slice-keys=0 --slice-keys=1024}; do
    timeout 270 $PY benchmarks/gpu/attention_decode_space.py --rows ${ROWS:-9,10,11,12,13,14,15,16,17} \
      --match hero-only ${SPLITS:+--splits $SPLITS} --all --repeats 15 $rule > "$RES/decode_space_ragged$rule.txt" 2>&1
    echo "space $rule rc=$?"; grep -E "^b[0-9]|hero\)" "$RES/decode_space_ragged$rule.txt" | awk '!seen[$0]++' | cut -c1-70
  done ;;
final)
  paged_table
  timeout 60 $PY benchmarks/gpu/attention_decode_space.py --rows 10,11 --match w8_k128_s3_tma --all --repeats 15 \
    > "$RES/decode_space_ragged_paged_tiles.txt" 2>&1
  grep -E "^b[0-9]|^\| w" "$RES/decode_space_ragged_paged_tiles.txt" | awk '!seen[$0]++'
  decode_tests 60 ;;
esac
true
