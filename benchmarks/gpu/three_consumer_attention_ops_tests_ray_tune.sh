#!/usr/bin/env bash
# One H100 call for issues 17, 18 and 20 (2026-11-25 night): the three-consumer wgmma attention's GPU test and
# its probe at head dim 64, batch 16; the two ops GPU tests that never ran on a GPU (CUDA-graph recipe, NCHW
# note); and one GPU: serial tune vs `--workers 1 --cluster local` (Ray, carried as .whl) on a five-tile space.
. benchmarks/gpu/gpu_run_env.sh
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > /tmp/install.log 2>&1 || tail -3 /tmp/install.log
export PYTHONPATH=$PYTHONPATH:/tmp/site RAY_USAGE_STATS_ENABLED=0
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  $PY -c "import torch, ray; print('torch', torch.__version__, 'ray', ray.__version__)"; } | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -x -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py -k three \
    > "$RES/test_three.txt" 2>&1; echo "rc=$?" >> "$RES/test_three.txt"; tail -4 "$RES/test_three.txt"
timeout 240 $PY benchmarks/gpu/wgmma_attention_probe.py --persistent --extra --match "d64 b16" --warmup 10 --repeats 40 \
    > "$RES/probe_d64.txt" 2>&1; echo "rc=$?" >> "$RES/probe_d64.txt"; cat "$RES/probe_d64.txt"
timeout 150 $PY -m pytest -q -m gpu -p no:cacheprovider tests/ops/test_ops_gpu.py -k "cuda_graph or nchw_note" \
    > "$RES/test_ops.txt" 2>&1; echo "rc=$?" >> "$RES/test_ops.txt"; tail -4 "$RES/test_ops.txt"
{
for mode in serial ray; do
    extra=(); [ $mode = ray ] && extra=(--cluster local)
    t0=$(date +%s%N)
    TRACEA_HOME=$(mktemp -d) timeout 150 $PY -m tracea tune gemm --m 2048 --n 4096 --k 4096 --dtype bf16 --backend cuda \
        --strategy exhaustive --space benchmarks/spaces/cuda_wgmma_tiles.toml --workers 1 --no-tui --json "${extra[@]}" \
        > "/tmp/$mode.json" 2>> "$RES/tune.err"
    rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "${mode}_one_gpu rc=$rc wall_s=$((ms / 1000)).$(printf %03d $((ms % 1000)))" | tee -a /tmp/walls.txt
done
$PY benchmarks/gpu/fleet_summary.py one /tmp/serial.json /tmp/ray.json /tmp/walls.txt
$PY -c "
import json; a, b = (json.load(open(f'/tmp/{m}.json')) for m in ('serial', 'ray'))
for d in (a, b): print(sorted((t['p50_ms'] or 0, t['name']) for t in d['trials']))
print('same best:', a['best']['name'] == b['best']['name'])"
} 2>&1 | tee "$RES/tune_ray.txt"
