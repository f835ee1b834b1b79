#!/usr/bin/env bash
# Stability of the timings behind every ratio (emitters/stability.py) on a GPU machine: the CPU suite's
# interleaved timings with and without the settle gap (benchmarks/bench_settle.py), the SIMT fp32 GEMM
# bench whose ratio a GPU test reads, the standard suite, and the GPU tests. Logs under $OUT.
set -uo pipefail
RES=${OUT:-$PWD/.out}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu_shim.sh
T="$PY -m tracea"
{
    $PY benchmarks/bench_settle.py --repeat 20
    for i in 1 2 3; do
        $T bench gemm --m 1000 --n 999 --k 1001 --dtype fp32 --backend cuda --json \
            | $PY -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['p50_ms'], r['p95_ms'], r['baseline_p50_ms'], r['ratio'], r['note'])"
    done
    $T bench
} > "$RES/stability.txt" 2>&1
cat "$RES/stability.txt"
{
    timeout 300 $PY -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tail -25
} > "$RES/gpu_tests.txt" 2>&1
tail -c 2500 "$RES/gpu_tests.txt"
