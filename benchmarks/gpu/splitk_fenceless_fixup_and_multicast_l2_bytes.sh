#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the last-unit fix-up without the fence after its wait and with direct
# stores (timelines of 512x512x16384), the split-K GPU tests; then why multicast pairs read more from L2
# than single blocks: Nsight Compute's L2 bytes for three forms under each tensor-map L2 promotion, and
# their event timings.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py tests/emitters/cuda/test_cuda_cluster_n_gpu.py \
    > "$RES/pytest.txt" 2>&1; echo "rc=$?" >> "$RES/pytest.txt"; tail -3 "$RES/pytest.txt"
mkdir -p "$RES/stamps"
timeout 200 $PY benchmarks/gpu/split_timeline.py --only hero,s8,128x64 --out "$RES/stamps" > "$RES/timeline.txt" 2>&1
echo "rc=$?" >> "$RES/timeline.txt"; grep -v "SM clock\|first stage ->\|entry -> exit\|    entry " "$RES/timeline.txt"
for pr in L2_256B L2_128B NONE; do
  echo "promotion $pr:"; timeout 100 $PY benchmarks/gpu/split_timeline.py --promotion $pr --no-timeline --only "hero,pair,cuBLAS" \
      2>&1 | tee "$RES/time_$pr.txt"
  for f in hero pair cuBLAS\'s; do
    timeout 60 ncu --clock-control none --cache-control all -k regex:tr_wgmma \
      --metrics gpu__time_duration.sum,lts__t_bytes.sum,l1tex__m_xbar2l1tex_read_bytes.sum,dram__bytes_read.sum \
      $PY benchmarks/gpu/split_timeline.py --promotion $pr --once "$f" > "$RES/ncu_${pr}_${f%\'s}.txt" 2>&1
    echo "$pr $f: $(grep -E 'gpu__time|lts__t_bytes|dram__bytes' "$RES/ncu_${pr}_${f%\'s}.txt" | tail -3 | awk '{print $1, $3}' | tr '\n' ' ')"
  done
done
