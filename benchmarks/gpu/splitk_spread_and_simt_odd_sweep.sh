#!/usr/bin/env bash
# Issue 16's last two rows on one sm_90 GPU. Logs in $OUT. Parts (skip with SKIP_X=1):
#   SPLIT: the split-K GPU tests, then split forms on the tail shape (split_probe.py --spread; FIXES,
#          SPREAD_MATCH), then Nsight Compute of the hero beside cuBLAS (pair_ncu.py)
#   SIMT:  the SIMT GPU tests, the odd shape swept (simt_odd.py --sweep; SIMT_SHAPES), Nsight Compute
. benchmarks/gpu/gpu_run_env.sh
NCU_SECTIONS="--section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis"
NCU_GREP="^  [a-zA-Z_].*\(|Duration|Registers|Achieved Occupancy|Warp Cycles Per Issued|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|DRAM Throughput|Grid Size|Cluster Size"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
git log --oneline -1 > "$RES/tree.txt" 2>/dev/null
if [ -z "${SKIP_SPLIT:-}" ]; then
  if [ -z "${SKIP_SPLIT_TESTS:-}" ]; then
    timeout 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py > "$RES/splitk_pytest.txt" 2>&1
    echo "rc=$?" >> "$RES/splitk_pytest.txt"; tail -4 "$RES/splitk_pytest.txt"
  fi
  timeout ${SPREAD_TIMEOUT:-200} $PY benchmarks/gpu/split_probe.py --spread --fixes "${FIXES:-last,spread}" \
      --match "${SPREAD_MATCH:-}" > "$RES/spread.txt" 2> "$RES/spread.err"
  echo "rc=$?" >> "$RES/spread.txt"; cat "$RES/spread.txt"; tail -3 "$RES/spread.err"
  timeout 90 ncu $NCU_SECTIONS --launch-count 5 $PY benchmarks/gpu/pair_ncu.py --shape 512x512x16384 --dtype bf16 \
      --launches 2 > "$RES/split_ncu.txt" 2>&1
  echo "rc=$?" >> "$RES/split_ncu.txt"; grep -E "$NCU_GREP" "$RES/split_ncu.txt" | head -60
fi
if [ -z "${SKIP_SIMT:-}" ]; then
  timeout 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_simt_core.py \
      "tests/emitters/cuda/test_cuda_gpu.py::test_kernel_matches_the_reference_on_odd_shapes" > "$RES/simt_pytest.txt" 2>&1
  echo "rc=$?" >> "$RES/simt_pytest.txt"; tail -4 "$RES/simt_pytest.txt"
  timeout ${SIMT_TIMEOUT:-150} $PY benchmarks/gpu/simt_odd.py ${SIMT_SWEEP:---sweep} --shapes ${SIMT_SHAPES:-1000x999x1001,1000x1000x1000} > "$RES/simt.txt" 2> "$RES/simt.err"
  echo "rc=$?" >> "$RES/simt.txt"; grep "(hero)" "$RES/simt.txt"; tail -12 "$RES/simt.txt"; tail -3 "$RES/simt.err"
  if [ -n "${SIMT_NCU:-}" ]; then
    timeout 90 ncu $NCU_SECTIONS --launch-count 5 $PY benchmarks/gpu/pair_ncu.py --shape 1000x999x1001 --dtype fp32 \
        --launches 2 > "$RES/simt_ncu.txt" 2>&1
    echo "rc=$?" >> "$RES/simt_ncu.txt"; grep -E "$NCU_GREP" "$RES/simt_ncu.txt" | head -60
  fi
fi
