#!/usr/bin/env bash
# The decode attention core (issue 33) on a GPU, in one call: its GPU tests (O and lse against float64 over
# GQA/MHA, 1-16 queries, head dims 32-256, masks, 1-64 key slices; tracea.ops on torch tensors), the compile
# tests, compute-sanitizer (memcheck, racecheck, synccheck) over its case, then the decode table against SDPA's
# fastest backend and the device copy bandwidth (benchmarks/gpu/attention_decode.py), then a short
# `tracea tune attention` of the issue's decode row on CUDA and `tracea bench` of the same row after it.
#     bash benchmarks/gpu/attention_decode_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 150 $PY -m pytest -q -p no:cacheprovider -rf tests/emitters/cuda/test_attention_decode_gpu.py \
  tests/emitters/cuda/test_attention_decode.py > "$RES/gpu_tests_decode.txt" 2>&1
tail -3 "$RES/gpu_tests_decode.txt"
for tool in memcheck racecheck synccheck; do
  extra=$([ $tool = memcheck ] && echo "--leak-check full" || ([ $tool = racecheck ] && echo "--racecheck-report all"))
  timeout 60 $SAN --tool $tool --report-api-errors no --print-limit 20 --error-exitcode 99 $extra \
    $PY benchmarks/gpu/sanitize_cases.py attention-decode --under-sanitizer > "$RES/sanitize_decode_$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_decode_$tool.txt" | sort | uniq -c | tr '\n' ' ')" \
    | tee -a "$RES/sanitize_decode_summary.txt"
done
timeout 200 $PY benchmarks/gpu/attention_decode.py --repeats ${REPEATS:-20} 2>&1 | tee "$RES/decode_table.txt" | tail -18
ROW="--batch 8 --heads 32 --kv-heads 8 --seq 1 --seq-k 8192 --head-dim 128 --dtype bf16 --backend cuda"
timeout 150 $PY -m tracea tune attention $ROW --budget ${BUDGET:-12} --time-limit 90 --no-tui > "$RES/decode_tune.txt" 2>&1
tail -12 "$RES/decode_tune.txt"
timeout 60 $PY -m tracea bench attention $ROW --repeat 20 > "$RES/decode_bench_tuned.txt" 2>&1
tail -8 "$RES/decode_bench_tuned.txt"
