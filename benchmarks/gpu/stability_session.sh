#!/usr/bin/env bash
# Stability of the timings behind every GPU ratio (emitters/stability.py): PyTorch baselines timed with and
# without a GPU sleep queued ahead of the start event (emitters/cuda/baselines.py, HOLD_CYCLES), the SIMT
# fp32 GEMM bench whose ratio a GPU test reads, the standard suite and the GPU tests. Logs under $OUT.
set -uo pipefail
RES=${OUT:-$PWD/.out}
mkdir -p "$RES"
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu_shim.sh
T="$PY -m tracea"
{
    $PY - <<'PYEOF'
import numpy as np
from tracea.emitters.cuda.baselines import time_torch, torch_baseline
from tracea.kernels import Gemm, Softmax
for op in (Gemm(m=1000, n=999, k=1001), Gemm(m=256, n=256, k=256, dtype="bf16"), Softmax(rows=4096, cols=1024)):
    b = torch_baseline(op, op.random_inputs(np.random.default_rng(0)))
    for hold in (0, 200_000):
        for _ in range(3):
            t = time_torch(b.run, 3, 30, hold_cycles=hold)
            print(f"torch  {op.signature[:40]:40s} hold {hold:7d}  p50 {t.p50_ms:.4f}  p95/p50 {t.p95_ms / t.p50_ms:.2f}  p50/min {t.p50_ms / t.min_ms:.2f}")
from tracea.doctor import probe
from tracea.doctor.plan import plan
from tracea.emitters import registry
cuda = registry.backend_module("cuda")
host = probe()
for op in (Gemm(m=256, n=256, k=256, dtype="bf16"), Gemm(m=4096, n=4096, k=4096, dtype="bf16"), Softmax(rows=4096, cols=1024)):
    v = registry.variant(plan(op, host, registry.all_variants("cuda"), backend="cuda").require())
    k = cuda.build(op, v, cuda.hero_schedule(op, v, host), host)
    inputs = op.random_inputs(np.random.default_rng(0))
    for hold in (0, 200_000):
        for _ in range(3):
            t = k.time(inputs, 3, 30, hold_cycles=hold)
            print(f"tracea {op.signature[:40]:40s} hold {hold:7d}  p50 {t.p50_ms:.4f}  p95/p50 {t.p95_ms / t.p50_ms:.2f}  p50/min {t.p50_ms / t.min_ms:.2f}")
PYEOF
    for i in 1 2 3; do
        $T bench gemm --m 1000 --n 999 --k 1001 --dtype fp32 --backend cuda --json \
            | $PY -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['p50_ms'], r['p95_ms'], r['baseline_p50_ms'], r['ratio'], r['note'])"
    done
    $T bench --backend cuda
} > "$RES/stability.txt" 2>&1
cat "$RES/stability.txt"
{
    timeout 300 $PY -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tail -25
} > "$RES/gpu_tests.txt" 2>&1
tail -c 2500 "$RES/gpu_tests.txt"
