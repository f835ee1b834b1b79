#!/usr/bin/env bash
# Issue 16's last two rows on one sm_90 GPU: the spread split-K fix-up (GPU tests, then every split form
# both ways), and the fp32 SIMT odd shape (aligned vs odd leading dimensions swept; Nsight Compute of the
# hero and cuBLAS). Logs in $OUT.
set -uo pipefail
RES=${OUT:-$PWD/.out}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 TRACEA_HOME=$(mktemp -d)
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
git log --oneline -1 > "$RES/tree.txt" 2>/dev/null
if [ -z "${SKIP_SPLIT:-}" ]; then
timeout 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/test_cuda_splitk.py > "$RES/splitk_pytest.txt" 2>&1
echo "rc=$?" >> "$RES/splitk_pytest.txt"; tail -6 "$RES/splitk_pytest.txt"
timeout ${SPREAD_TIMEOUT:-200} $PY benchmarks/gpu/split_probe.py --spread --match "${SPREAD_MATCH:-}" > "$RES/spread.txt" 2> "$RES/spread.err"
echo "rc=$?" >> "$RES/spread.txt"; cat "$RES/spread.txt"; tail -3 "$RES/spread.err"
fi
if [ -z "${SKIP_SIMT:-}" ]; then
timeout ${SIMT_TIMEOUT:-150} $PY benchmarks/gpu/simt_odd.py --sweep --shapes ${SIMT_SHAPES:-1000x999x1001,1000x1000x1000} > "$RES/simt.txt" 2> "$RES/simt.err"
echo "rc=$?" >> "$RES/simt.txt"; tail -25 "$RES/simt.txt"; tail -3 "$RES/simt.err"
timeout 90 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --launch-count 6 $PY benchmarks/gpu/simt_ncu.py > "$RES/simt_ncu.txt" 2>&1
echo "rc=$?" >> "$RES/simt_ncu.txt"; grep -E "^  [a-z_A-Z].*\(|Duration|Registers|Achieved Occupancy|Issue Slots|Warp Cycles Per Issued|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|Block Size|Grid Size|Stall" "$RES/simt_ncu.txt" | head -80
fi
