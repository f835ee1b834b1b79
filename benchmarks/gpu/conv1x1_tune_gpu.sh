#!/usr/bin/env bash
# `tracea tune conv2d` on ResNet-50's batch-32 1x1 convs that stay under or near 0.9x cuDNN on their heuristic
# schedules (issue 34), in one call on one sm_90 GPU: for each row the tune (every candidate verified, then timed),
# then `tracea bench` of the row with the tuned schedule and with the heuristic one (a second, empty TRACEA_HOME),
# both beside cuDNN in the same process.
#     ROWS="32,1024,14,256 32,512,7,2048" BUDGET=30 TUNE_S=110 bash benchmarks/gpu/conv1x1_tune_gpu.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$RES/device.txt"
HERO_HOME=$(mktemp -d)
for row in ${ROWS:-32,1024,14,256 32,1024,14,512 32,512,7,2048 32,2048,7,512}; do
  IFS=, read -r n c h k <<< "$row"
  ARGS=(conv2d --n "$n" --c "$c" --h "$h" --w "$h" --k "$k" --r 1 --s 1 --layout nhwc --dtype fp16 --backend cuda)
  name="n${n}c${c}h${h}k${k}"
  timeout ${TUNE_S:-110} $PY -m tracea tune "${ARGS[@]}" --budget ${BUDGET:-30} --time-limit $(( ${TUNE_S:-110} - 20 )) \
    --no-tui > "$RES/tune_$name.txt" 2>&1
  echo "tune $row rc=$?"; tail -12 "$RES/tune_$name.txt" | cut -c1-220
  timeout 60 $PY -m tracea bench "${ARGS[@]}" --repeat 30 > "$RES/bench_tuned_$name.txt" 2>&1
  echo "bench tuned $row rc=$?"; tail -4 "$RES/bench_tuned_$name.txt" | cut -c1-260
  TRACEA_HOME=$HERO_HOME timeout 60 $PY -m tracea bench "${ARGS[@]}" --repeat 30 > "$RES/bench_hero_$name.txt" 2>&1
  echo "bench hero $row rc=$?"; tail -4 "$RES/bench_hero_$name.txt" | cut -c1-260
done
