#!/usr/bin/env bash
# The GPU checks of issue 30 (nothing lost, nothing run, nothing silently wrong): the CUDA kernels' NaN and inf
# propagation and the relu epilogue change, verified on the GPU; compute-sanitizer's memcheck, racecheck and
# synccheck over one case of every kernel family (reports kept); `tracea tune attention --backend cuda`; the
# GPU tests of the kernels the change touched.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
export PATH=$PATH:/usr/local/cuda/bin
STEP=${STEP:-all}   # sanitize | tests | all: two calls when one would outrun the 10-minute limit
if [ $STEP != tests ]; then
{
    echo "== sanitize cases, plain"; timeout 200 $PY benchmarks/gpu/sanitize_cases.py; echo "rc=$?"
    for tool in memcheck synccheck racecheck; do
        echo "== $tool"
        extra="--leak-check full"; [ $tool = racecheck ] && extra="--racecheck-report all"; [ $tool = synccheck ] && extra=""
        timeout ${SAN_LIMIT:-130} compute-sanitizer --tool $tool --report-api-errors no --print-limit 12 --error-exitcode 99 $extra \
            $PY benchmarks/gpu/sanitize_cases.py --under-sanitizer ${ONLY:-} 2>&1 | grep -v "^=========     " | tail -60
        echo "rc=${PIPESTATUS[0]}"
    done
    echo "== racecheck, case by case"
    for case in $($PY benchmarks/gpu/sanitize_cases.py --list | cut -d' ' -f1); do
        timeout 120 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 3 --error-exitcode 99 \
            $PY benchmarks/gpu/sanitize_cases.py --under-sanitizer $case 2>&1 | grep -E "SUMMARY|WRONG| ok$|hazard detected" | head -6
        echo "rc=${PIPESTATUS[0]} $case"
    done
} > "$RES/sanitize.txt" 2>&1
grep -E "^==|rc=|SUMMARY|WRONG" "$RES/sanitize.txt"
fi
[ $STEP = sanitize ] && exit 0
{
    echo "== tune attention --backend cuda"
    timeout 120 $PY -m tracea --debug tune attention --batch 1 --heads 4 --seq 1024 --head-dim 128 --dtype bf16 \
        --backend cuda --budget 4 --no-tui 2>&1 | tail -40; echo "rc=${PIPESTATUS[0]}"
} > "$RES/tune_attention.txt" 2>&1
tail -25 "$RES/tune_attention.txt"
timeout 400 $PY -m pytest -q -m gpu -p no:cacheprovider -x ${TESTS:-tests/emitters/test_nan_propagation_gpu.py tests/emitters/cuda/test_cuda_gpu.py \
    tests/ops/test_ops_gpu.py tests/emitters/cuda/test_simt_core_gpu.py tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py tests/emitters/cuda/test_cuda_stem_gpu.py} > "$RES/pytest.txt" 2>&1
echo "rc=$?" >> "$RES/pytest.txt"; grep -E "passed|failed|FAILED|Error" "$RES/pytest.txt" | tail -15
