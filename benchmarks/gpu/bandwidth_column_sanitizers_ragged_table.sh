#!/usr/bin/env bash
# What the CPU-only work of 2026-11-30 left for a GPU, in one call:
# 1. the bandwidth column on a GPU (issue 34): `tracea bench`'s quick CUDA llm-gemm suite, one decode GEMM and the
#    issue-33 decode attention row, the device copy measured through the driver API beside cuda-core's context and
#    torch (emitters/copy_bandwidth.py);
# 2. racecheck and synccheck over the three-consumer split-K conv form (memcheck ran clean,
#    docs/device-runs/h200-three-consumer-split-barrier/): the condition for lifting WgmmaSchedule's refusal;
# 3. the paged decode table through tracea.ops at the landed uneven-batch rule (issue 33; its ragged rows did not
#    run at that rule);
# 4. the one-long-entry rows (one 32k entry among fifteen of 1k, contiguous and paged by 16: paged ran at 0.82-0.84x
#    its twin): more slices for the long entry (a wider grid, --ragged-waves 8) and fixed slice counts; then the
#    uneven rows with the grid capped at the slices an entry can take (--grid-cap) beside the landed grid.
#     bash benchmarks/gpu/bandwidth_column_sanitizers_ragged_table.sh
# Knobs: PARTS ("1 2 3 4").
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
for part in ${PARTS:-1 2 3 4}; do
  case $part in
  1)
    COLUMNS=220 timeout 200 $PY -m tracea bench --suite llm-gemm --backend cuda --quick > "$RES/suite_llm_gemm_quick.txt" 2>&1
    echo "suite rc=$?"; tail -8 "$RES/suite_llm_gemm_quick.txt"
    COLUMNS=220 timeout 100 $PY -m tracea bench gemm --m 1 --n 4096 --k 14336 --dtype bf16 --backend cuda \
      > "$RES/bench_gemm_1x4096x14336.txt" 2>&1
    echo "bench rc=$?"; grep -E "tracea|memory-bound|unstable" "$RES/bench_gemm_1x4096x14336.txt" | cut -c1-200
    COLUMNS=220 timeout 100 $PY -m tracea bench attention --batch 8 --heads 32 --kv-heads 8 --seq 1 --seq-k 8192 \
      --head-dim 128 --dtype bf16 --backend cuda > "$RES/bench_attention_decode.txt" 2>&1
    echo "decode rc=$?"; grep -E "tracea|memory-bound|unstable" "$RES/bench_attention_decode.txt" | cut -c1-200 ;;
  2)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for tool in racecheck synccheck; do
      timeout 150 $SAN --tool $tool --report-api-errors no --print-limit 10 --error-exitcode 99 \
        $PY benchmarks/gpu/three_consumer_split_forms.py 0 --unrefused --once > "$RES/sanitize_three_consumer_$tool.txt" 2>&1
      echo "$tool rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$RES/sanitize_three_consumer_$tool.txt" | tr '\n' ' ')"
    done ;;
  3)
    timeout 240 $PY benchmarks/gpu/attention_paged.py --repeats 20 2>&1 | tee "$RES/paged_table.txt" | tail -8 | cut -c1-200 ;;
  4)
    for waves in 4 8; do
      timeout 150 $PY benchmarks/gpu/attention_decode_space.py --rows 12,13 --match w8_k128_s3_tma,w4_k64_s3_tma \
        --splits 16,24 --all --repeats 15 --ragged-waves $waves > "$RES/decode_space_one_long_waves$waves.txt" 2>&1
      echo "one long, waves $waves rc=$?"; grep -E "^b[0-9]|hero\)" "$RES/decode_space_one_long_waves$waves.txt" | awk '!seen[$0]++'
    done
    for cap in "" --grid-cap; do
      timeout 200 $PY benchmarks/gpu/attention_decode_space.py --rows 9,10,14,15 --match hero-only --all --repeats 15 \
        $cap > "$RES/decode_space_grid${cap:-_landed}.txt" 2>&1
      echo "grid ${cap:-landed} rc=$?"; grep -E "^b[0-9]|hero\)" "$RES/decode_space_grid${cap:-_landed}.txt" | awk '!seen[$0]++'
    done ;;
  esac
done
true
