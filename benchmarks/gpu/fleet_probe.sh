#!/usr/bin/env bash
# Where a lane's time goes when two tunes share a host (issue 20): one `tracea tune` alone on GPU 0, then two
# separate processes at once (GPU 0 and GPU 1), same problem; and the host-side verification arithmetic
# (bf16 output to float64, relative error against the reference) alone and in two processes at once.
. benchmarks/gpu/gpu_run_env.sh
ARGS=(tune gemm --m 8192 --n 4096 --k 4096 --dtype bf16 --backend cuda --budget 20 --seed 1 --no-tui --json)
t() { local h=$(mktemp -d) t0=$(date +%s%N)
      CUDA_VISIBLE_DEVICES=$1 TRACEA_HOME=$h $PY -m tracea "${ARGS[@]}" > /dev/null 2>"$RES/err$1.txt"
      echo "gpu $1 rc=$? wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))"; $PY benchmarks/gpu/fleet_summary.py db $h/tuning.sqlite; }
{
echo "== alone"; t 0
echo "== two processes at once"; t 0 & t 1 & wait
cat > /tmp/bw.py <<'PY'
import time, numpy as np
rng = np.random.default_rng(0)
ref = rng.standard_normal((8192, 4096))
out = ref.astype(np.float32).astype(np.uint32) >> 16  # a bf16 bit pattern's size of data
t0 = time.perf_counter()
for _ in range(5):
    f = (out.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    err = np.linalg.norm(f - ref) / np.linalg.norm(ref)
print(f"verify arithmetic: {(time.perf_counter() - t0) / 5 * 1e3:.0f} ms per candidate")
PY
echo "== host verify alone"; $PY /tmp/bw.py
echo "== host verify, two processes"; $PY /tmp/bw.py & $PY /tmp/bw.py & wait
} 2>&1 | tee "$RES/probe.txt"
