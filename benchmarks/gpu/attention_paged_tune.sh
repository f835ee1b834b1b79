#!/usr/bin/env bash
# `tracea tune attention` on a paged decode row (issue 33), in one call: the tune (its space: the decode core's
# schedules; every candidate verified, then timed), `tracea bench` of the paged row after it (the tuned
# schedule) and of its contiguous twin, both against SDPA's fastest backend in the same run.
#     ROW="--batch 1 --heads 32 --kv-heads 8 --seq 1 --seq-k 131072 --head-dim 128" bash benchmarks/gpu/attention_paged_tune.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
ROW="${ROW:---batch 1 --heads 32 --kv-heads 8 --seq 1 --seq-k 131072 --head-dim 128} --dtype bf16 --backend cuda"
PAGE=${PAGE:-16}
timeout 140 $PY -m tracea tune attention $ROW --page-size $PAGE --budget ${BUDGET:-12} --time-limit 100 --no-tui \
  > "$RES/paged_tune.txt" 2>&1
tail -16 "$RES/paged_tune.txt"
timeout 60 $PY -m tracea bench attention $ROW --page-size $PAGE --repeat 20 > "$RES/paged_bench_tuned.txt" 2>&1
tail -6 "$RES/paged_bench_tuned.txt"
timeout 60 $PY -m tracea bench attention $ROW --repeat 20 > "$RES/contiguous_bench.txt" 2>&1
tail -6 "$RES/contiguous_bench.txt"
