#!/usr/bin/env bash
# The tuner on a GPU (issue 6), as a user runs it: every GPU-marked test (the tuner's fault test on the
# device: a hung kernel, an illegal address, a trap, a wrong answer and an NVRTC error each recorded, the
# worker recovering), then `tracea tune` on the CUDA backend with the vendor baseline on the device,
# pack-repro of that tune run and its replay, the stored best reused by a second call and by
# `tracea bench`, and a tune of the mma.sync space with named swizzles pruned by the bank simulator.
# Installs nothing (benchmarks/gpu/shim.sh). Results under $OUT (default ./.out).
set -uo pipefail
FINAL=${OUT:-$PWD/.out}
mkdir -p "$FINAL"
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh
T="$PY -m tracea"
MODE=${1:-all}  # tests | tune | all
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$FINAL/gpu.txt"
if [ "$MODE" != tune ]; then
    echo "== pytest -m gpu"
    timeout 420 $PY -m pytest -q -m gpu -p no:cacheprovider -rs --ignore=tests/cli/test_tui.py --ignore=tests/cli/test_tuner_tui.py tests/ > "$FINAL/pytest_gpu.txt" 2>&1
    echo "pytest rc=$?"; tail -25 "$FINAL/pytest_gpu.txt"
fi
[ "$MODE" = tests ] && exit 0
W="--dtype bf16 --backend cuda"
{
    set -x
    $T tune gemm --m 4096 $W --budget 24 --no-tui --seed 1 --csv "$FINAL/tune_wgmma.csv" --jsonl "$FINAL/tune_wgmma.jsonl" \
        --json > "$FINAL/tune_wgmma.json"
    run=$($PY -c "import json,os;print(os.path.basename(json.load(open('$FINAL/tune_wgmma.json'))['run_dir']))")
    $PY -c "
import json; d = json.load(open('$FINAL/tune_wgmma.json'))
print(d['variant'], d['evaluated'], 'of', d['space_size'], d['statuses'], d['stop_reason'])
print('best', d['best']['name'], d['best']['p50_ms'], 'ms', round(d['best_tflops'], 1), 'TFLOP/s')
print('baseline', json.dumps(d['baseline'])); print('ratio', d['ratio_to_baseline'])"
    $T pack-repro --run "$run" -o "$FINAL/tune-bundle.tar.gz"
    $T replay "$FINAL/tune-bundle.tar.gz" --yes
    echo "replay rc=$?"
    $T tune gemm --m 4096 $W --budget 24 --no-tui --seed 1
    $T bench gemm --m 4096 $W --repeat 30
    $T tune gemm --m 4096 $W --variant cuda-mma-sync.gemm --space benchmarks/spaces/cuda_mma_swizzles.toml --budget 40 \
        --no-tui --seed 2 --csv "$FINAL/tune_mma_swizzles.csv"
    set +x
} > "$FINAL/tune.txt" 2>&1
tail -c 9000 "$FINAL/tune.txt"
