#!/usr/bin/env bash
# CUDA attention (issue 17) on one GPU: the GPU tests of each attention core, then the probe of the
# issue's cases beside torch SDPA (and FlexAttention for masks). Logs in $OUT.
#     VARIANTS="cuda-mma-sync.attention cuda-wgmma.attention" PROBE_ARGS="--quick" bash benchmarks/gpu/attention_gpu_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
$PY -c "import torch; print('torch', torch.__version__)" | tee -a "$RES/device.txt"
for t in ${TESTS:-tests/emitters/cuda/test_cuda_attention_gpu.py}; do
  name=$(basename $t .py)
  timeout ${TEST_TIMEOUT:-180} $PY -m pytest -q -x -m gpu -p no:cacheprovider $t > "$RES/$name.txt" 2>&1
  echo "rc=$?" >> "$RES/$name.txt"; tail -12 "$RES/$name.txt"
done
for v in ${VARIANTS:-cuda-mma-sync.attention}; do
  timeout ${PROBE_TIMEOUT:-240} $PY benchmarks/gpu/attention_probe.py --variant $v ${PROBE_ARGS:-} --json "$RES/probe_$v.json" \
      > "$RES/probe_$v.txt" 2> "$RES/probe_$v.err"
  echo "rc=$?" >> "$RES/probe_$v.txt"; cat "$RES/probe_$v.txt"; tail -5 "$RES/probe_$v.err"
done
