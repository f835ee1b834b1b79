#!/usr/bin/env bash
# conv_heroes.columns_192 (issue 34) on one sm_90 GPU, in one call: compute-sanitizer (memcheck, racecheck, synccheck)
# over its two tile forms on ragged 3x3 convs (one log), then the hero beside the rule before it on held-out 3x3
# shapes and on those it was fitted on (benchmarks/gpu/conv3x3_batches.py --compare).
#     bash benchmarks/gpu/conv3x3_columns_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
  echo "=== $tool" >> "$RES/sanitize.txt"
  timeout 120 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
    $PY benchmarks/gpu/sanitize_cases.py wgmma-conv3x3-128x192 wgmma-conv3x3-64x192 --under-sanitizer \
    >> "$RES/sanitize.txt" 2>&1
  echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize.txt" | tail -1)"
done
grep -E " ok$| WRONG$" "$RES/sanitize.txt" | sort | uniq -c
timeout 150 $PY benchmarks/gpu/conv3x3_batches.py --compare --held-out --batches 4,8,16,32,64 > "$RES/held_out.txt" 2>&1
echo "held-out rc=$?"
timeout 100 $PY benchmarks/gpu/conv3x3_batches.py --compare --batches 4,8,16,32,64 --channels 192,320,384,768 \
  > "$RES/fitted.txt" 2>&1
echo "fitted rc=$?"
true
