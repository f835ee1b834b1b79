#!/usr/bin/env bash
# Every head dim on the CUDA prefill attention kernels (issue 33, item 4) on one GPU, in one call: the GPU
# tests of the new head dims (every multiple of 16 from 32 to 256; odd lengths, causal both ways, seq_q !=
# seq_k, GQA, windows, block masks) on the Hopper wgmma kernel and on the mma.sync kernel, then the head-dim
# table at B4 H32 S4096 bf16, causal and not, each case verified and timed beside SDPA's fastest backend
# (benchmarks/gpu/attention_probe.py --cases head-dims; CUDA events, medians, L2 flushed). SCHEDULES (schedule
# JSON objects separated by ';') times those Hopper schedules on the table's rows matching MATCH instead;
# TESTS=0 and TABLE=0 leave the tests and the table out.
#     bash benchmarks/gpu/attention_head_dims_checks.sh
#     TESTS=0 TABLE=0 MATCH=d160 SCHEDULES='{"core":"wgmma-attention","bk":96,"stages":3}' bash benchmarks/gpu/attention_head_dims_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
$PY -c "import torch; print('torch', torch.__version__)" | tee -a "$RES/device.txt"
N=${WORKERS:-8}
if [ "${TESTS:-1}" = 1 ]; then
  timeout ${WGMMA_TESTS_S:-80} $PY -m pytest -q -p no:cacheprovider -rf -n $N -m gpu -k every_head_dim \
    tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py > "$RES/gpu_tests_wgmma.txt" 2>&1
  echo "rc=$?" >> "$RES/gpu_tests_wgmma.txt"; tail -4 "$RES/gpu_tests_wgmma.txt"
  timeout ${MMA_TESTS_S:-50} $PY -m pytest -q -p no:cacheprovider -rf -n $N -m gpu -k every_head_dim \
    tests/emitters/cuda/test_cuda_attention_gpu.py > "$RES/gpu_tests_mma_sync.txt" 2>&1
  echo "rc=$?" >> "$RES/gpu_tests_mma_sync.txt"; tail -4 "$RES/gpu_tests_mma_sync.txt"
fi
if [ "${TABLE:-1}" = 1 ]; then
  timeout ${TABLE_S:-120} $PY benchmarks/gpu/attention_probe.py --cases head-dims --repeats ${REPEATS:-20} \
    --variant cuda-wgmma.attention cuda-mma-sync.attention --json "$RES/head_dims_table.json" \
    2>&1 | tee "$RES/head_dims_table.txt"
fi
IFS=';' read -ra SCHEDS <<< "${SCHEDULES:-}"
for s in "${SCHEDS[@]}"; do
  echo "schedule $s" | tee -a "$RES/head_dims_schedules.txt"
  timeout ${SCHEDULE_S:-40} $PY benchmarks/gpu/attention_probe.py --cases head-dims --match "${MATCH:-}" \
    --repeats ${REPEATS:-20} --variant cuda-wgmma.attention --schedule "$s" 2>&1 | tee -a "$RES/head_dims_schedules.txt"
done
