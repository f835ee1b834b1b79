#!/usr/bin/env bash
# One H100 call (2026-11-26): the quick suites and `tracea plan` as a user runs them, with HIP registered
# (the runnable backends here: cpu and cuda; HIP passed over for want of an AMD GPU).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
$PY -m tracea plan gemm --m 4096 --dtype bf16 > "$RES/plan.txt" 2>&1; head -3 "$RES/plan.txt"
timeout 400 $PY -m tracea bench --quick --repeat 10 > "$RES/bench_quick.txt" 2>&1
echo "rc=$?" >> "$RES/bench_quick.txt"; cat "$RES/bench_quick.txt"
