#!/usr/bin/env bash
# `tracea tune scaled_gemm --out-dtype fp8e4m3` on one sm_90 GPU (issue 35: the FP8 C's tiles behind cuBLASLt into
# FP8 at 0.86-0.98x on their heroes), in one call: for each row, the tune (every candidate verified, C and its
# amax, then timed), then `tracea bench` of the row with the tuned schedule beside `torch._scaled_mm` into FP8.
#     ROWS="8192,4096,4096 128,4096,4096" BUDGET=40 bash benchmarks/gpu/fp8_out_tune_gpu.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$RES/device.txt"
for row in ${ROWS:-8192,4096,4096 128,4096,4096}; do
  IFS=, read -r m n k <<< "$row"
  ARGS=(scaled_gemm --m "$m" --n "$n" --k "$k" --dtype fp8e4m3 --out-dtype fp8e4m3 --scale tensor --backend cuda)
  timeout ${TUNE_S:-230} $PY -m tracea tune "${ARGS[@]}" --budget ${BUDGET:-40} --time-limit $(( ${TUNE_S:-230} - 30 )) \
    --no-tui > "$RES/tune_${m}x${n}x${k}.txt" 2>&1
  echo "tune $row rc=$?"; tail -14 "$RES/tune_${m}x${n}x${k}.txt" | cut -c1-220
  timeout 90 $PY -m tracea bench "${ARGS[@]}" --repeat 30 > "$RES/bench_${m}x${n}x${k}.txt" 2>&1
  echo "bench $row rc=$?"; tail -6 "$RES/bench_${m}x${n}x${k}.txt" | cut -c1-260
done
