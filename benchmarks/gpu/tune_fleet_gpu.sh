#!/usr/bin/env bash
# Issue 20 on a host with several GPUs: `tracea tune --suite` of the 8 bf16 GEMMs in fleet_problems.json,
# tuned on every GPU (lanes: one problem per GPU at a time) against the same suite on one GPU
# (CUDA_VISIBLE_DEVICES=0); and one problem tuned serially against `--workers 1 --cluster local` on one GPU
# (the overhead of Ray per candidate). Each run has a fresh TRACEA_HOME (its own database and build cache:
# nothing compiled by one run is reused by another). Installs nothing but what .whl holds (Ray, for `ray`).
#
#     bash benchmarks/gpu/tune_fleet_gpu.sh local    # the suite on all GPUs, then on one
#     bash benchmarks/gpu/tune_fleet_gpu.sh ray      # serial vs Ray on one GPU; the suite over Ray
#     bash benchmarks/gpu/tune_fleet_gpu.sh raylanes # the suite on Ray's lanes between two local runs
. benchmarks/gpu/gpu_run_env.sh
MODE=${1:-local}
BUDGET=${BUDGET:-12}
PROBLEMS=benchmarks/gpu/fleet_problems.json
export RAY_USAGE_STATS_ENABLED=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ "$MODE" = ray ] || [ "$MODE" = raylanes ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        > "$RES/install.log" 2>&1 || { tail -5 "$RES/install.log"; exit 1; }
    export PYTHONPATH=$PYTHONPATH:/tmp/site  # the checkout's shim first; Ray and its needs after the image's own
    $PY -c "import ray; print('ray', ray.__version__)" | tee -a "$RES/device.txt"
fi
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader | tee -a "$RES/device.txt"
nproc | tee -a "$RES/device.txt"

wall() {  # NAME RC T0_NS: one line of walls.txt (no bc on the device machine)
    local ms=$(( ($(date +%s%N) - $3) / 1000000 ))
    echo "$1 rc=$2 wall_s=$((ms / 1000)).$(printf %03d $((ms % 1000)))" | tee -a "$RES/walls.txt"
}

suite() {  # NAME [extra options...]: one suite run, its wall time and rows in $RES/NAME.*; GPU use sampled
    local name=$1; shift
    local home=$(mktemp -d) t0=$(date +%s%N)
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader -lms 500 > "$RES/$name.gpu" &
    local smi=$!
    TRACEA_HOME=$home timeout 560 $PY -m tracea tune --suite $PROBLEMS --backend cuda --budget $BUDGET --seed 1 \
        --json "$@" > "$RES/$name.json" 2>> "$RES/errs.txt"
    wall $name $? $t0
    kill $smi
    $PY benchmarks/gpu/fleet_summary.py db "$home/tuning.sqlite"
    awk -F', ' '{split($3, u, " "); n[$2]++; s[$2]+=u[1]; if (u[1] > 0) b[$2]++}
        END {for (g in n) printf "GPU %s: mean utilisation %.0f %%, busy in %d of %d samples\n", g, s[g]/n[g], b[g], n[g]}' \
        "$RES/$name.gpu"
    rm -f "$RES/$name.gpu"
}

one() {  # NAME [extra options...]: one problem tuned, wall time and JSON (with trials) in $RES/NAME.*
    local name=$1; shift
    local t0=$(date +%s%N)
    CUDA_VISIBLE_DEVICES=0 TRACEA_HOME=$(mktemp -d) timeout 280 $PY -m tracea tune gemm --m 2048 --n 4096 --k 4096 \
        --dtype bf16 --backend cuda --budget $BUDGET --seed 1 --no-tui --json --jsonl "/tmp/$name.jsonl" "$@" \
        > "$RES/$name.json" 2>> "$RES/errs.txt"
    wall $name $? $t0
}

warm() {  # the machine's RAM grows as it is used (H200.md) and the first tunes after boot run slow: touch
    # 48 GB of host memory and tune one small problem before anything is timed, then alternate the runs
    $PY -c "import numpy as np; a = np.ones(6 * 2**30); print('touched', a.nbytes >> 30, 'GiB')"
    CUDA_VISIBLE_DEVICES=0 TRACEA_HOME=$(mktemp -d) $PY -m tracea tune gemm --m 1024 --dtype bf16 --backend cuda \
        --budget 8 --no-tui --json > /dev/null 2>&1
    echo "warm-up tune rc=$?"
}

{
warm
if [ "$MODE" = local ]; then
    for i in $(seq 1 ${PAIRS:-2}); do
        CUDA_VISIBLE_DEVICES=0 suite suite_one_gpu_$i
        suite suite_all_gpus_$i
    done
    for i in $(seq 1 ${PAIRS:-2}); do
        $PY benchmarks/gpu/fleet_summary.py suite "$RES/suite_one_gpu_$i.json" "$RES/suite_all_gpus_$i.json" "$RES/walls.txt"
    done
elif [ "$MODE" = raylanes ]; then  # Ray's lanes (one actor a GPU for the whole suite) between two local runs
    suite suite_all_gpus_1
    suite suite_ray_all_gpus --cluster local
    suite suite_all_gpus_2
    $PY benchmarks/gpu/fleet_summary.py rows "$RES/suite_ray_all_gpus.json"
    $PY -c "
import json; from tracea.doctor import probe; from tracea.emitters.registry import fingerprint
rows = json.load(open('$RES/suite_ray_all_gpus.json')); here = fingerprint(probe(), 'cuda')
print('this host:', here, '| the rows:', sorted({(r.get('fingerprint'), r.get('machine')) for r in rows}))
print('stored under this host\'s fingerprint:', all(r.get('fingerprint') == here for r in rows))"
else
    one serial_one_gpu --workers 1
    one ray_one_gpu --workers 1 --cluster local
    $PY benchmarks/gpu/fleet_summary.py one "$RES/serial_one_gpu.json" "$RES/ray_one_gpu.json" "$RES/walls.txt"
    suite suite_ray_all_gpus --cluster local
    $PY benchmarks/gpu/fleet_summary.py rows "$RES/suite_ray_all_gpus.json"
fi
} 2>&1 | tee "$RES/summary.txt"
