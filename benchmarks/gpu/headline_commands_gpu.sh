#!/usr/bin/env bash
# The headline commands on a GPU machine, as a new user types them (issue 13): no --backend anywhere.
# `tracea tune gemm --m 4096` must tune the GPU kernel; `tracea bench` with no operation runs the standard
# suite on every backend the machine has; the GPU tests run without textual installed (they skip cleanly);
# a pinned OpenBLAS on the host CPU is warned about. Installs nothing: `tracea` is imported from this
# checkout through benchmarks/gpu/shim.sh. Logs under $OUT (default ./.out).
set -uo pipefail
RES=${OUT:-$PWD/.out}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh
T="$PY -m tracea"
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
    lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200
    env | grep -E "OPENBLAS|OMP_|MKL_" || echo "(no BLAS variables set)"
    $T doctor --plain | head -40
    set -x
    $T plan gemm --m 4096 --dtype bf16 | head -3
    $T tune gemm --m 4096 --budget 6 --no-tui --seed 1
    $T tune gemm --m 4096 --dtype bf16 --budget 8 --no-tui --seed 1
    $T bench gemm --m 4096 --dtype bf16 --repeat 30
    $T bench --metrics "$RES/suite.csv"
    $T bench --json > "$RES/suite.json"
    $T bench gemm --m 2048 --backend cpu
    OPENBLAS_CORETYPE=Haswell $T bench gemm --m 2048 --backend cpu
    set +x
} > "$RES/headline.txt" 2>&1
tail -c 7000 "$RES/headline.txt"
{
    timeout 400 $PY -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tail -25
} > "$RES/gpu_tests.txt" 2>&1
tail -c 3000 "$RES/gpu_tests.txt"
