#!/usr/bin/env bash
# After the emitters' restructuring (issue 15), on one NVIDIA GPU: every GPU test (each CUDA core verified on
# odd shapes with fused epilogues, the Hopper GEMM and conv included), every CUDA kernel of bench_cuda.py
# verified against the float64 reference, and the standard CUDA suite through `tracea bench` against the
# vendor library in the same run. Installs nothing: `tracea` is imported from this checkout through
# benchmarks/gpu/shim.sh. Logs in $OUT (or ./.out).
#
#     bash benchmarks/gpu/emitters_gpu_regression.sh
set -uo pipefail
RES=${OUT:-$PWD/.out}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
    timeout 480 $PY -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tail -40
} > "$RES/gpu_tests.txt" 2>&1
tail -c 3000 "$RES/gpu_tests.txt"
timeout 300 $PY benchmarks/bench_cuda.py verify > "$RES/verify.txt" 2>&1
tail -c 3000 "$RES/verify.txt"
timeout 300 $PY benchmarks/gpu/wgmma_conv_run.py --smoke --out "$RES/wgmma_conv" > "$RES/wgmma_conv.txt" 2>&1
tail -c 1500 "$RES/wgmma_conv.txt"
timeout 400 $PY -m tracea bench --backend cuda > "$RES/suite.txt" 2>&1
tail -c 4000 "$RES/suite.txt"
