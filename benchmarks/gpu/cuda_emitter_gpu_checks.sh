#!/usr/bin/env bash
# The CUDA emitter's GPU session (issue 4): run on a machine with an NVIDIA GPU from the repository root.
#   benchmarks/gpu/cuda_emitter_gpu_checks.sh smoke   # versions, verify on odd shapes, a quick benchmark table
#   benchmarks/gpu/cuda_emitter_gpu_checks.sh full    # verify, compute-sanitizer, benchmark, ncu bank conflicts, search space
#   benchmarks/gpu/cuda_emitter_gpu_checks.sh gemm    # verify, the mma.sync GEMM schedules vs cuBLAS, GPU tests, ncu
#   benchmarks/gpu/cuda_emitter_gpu_checks.sh epilogue  # verify, the GEMM schedules (staged vs direct epilogue) vs cuBLAS, GPU tests
# Writes logs and JSON under $OUT (default ./.out). Installs nothing from the network: `tracea` is imported
# from this checkout through a folder of links that mirrors pyproject's package-dir map.
set -uo pipefail
MODE=${1:-smoke}
FINAL=${OUT:-$PWD/.out}
mkdir -p "$FINAL"
# Everything is written to a work folder; on exit the JSON results are copied out and the logs packed
# into one archive (the device tool brings back at most 8 files).
OUT=$(mktemp -d /tmp/cuda_run.XXXX)
finish() {
    cp "$OUT"/*.json "$FINAL"/ 2>/dev/null
    tar czf "$FINAL/logs.tgz" -C "$OUT" --exclude='*.npy' --exclude='*.npz' . 2>/dev/null
}
trap finish EXIT
trap 'exit 124' TERM INT
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
$PY - <<'PY' | tee -a "$OUT/device.txt"
import importlib.metadata as md
for p in ("cuda-core", "cuda-bindings", "nvidia-cuda-nvrtc", "torch", "numpy"):
    try: print(p, md.version(p))
    except Exception as e: print(p, "missing", e)
from cuda.bindings import nvrtc; print("nvrtc", nvrtc.nvrtcVersion()[1:])
PY

case "$MODE" in
smoke)
    $PY benchmarks/bench_cuda.py verify --out "$OUT" 2>&1 | tee "$OUT/verify.log"
    $PY benchmarks/bench_cuda.py bench --repeats 10 --out "$OUT" 2>&1 | tee "$OUT/bench.log"
    command -v ncu compute-sanitizer | tee -a "$OUT/device.txt"
    ;;
probe)
    $PY benchmarks/bench_cuda.py verify --out "$OUT" 2>&1 | tee "$OUT/verify.log" | tail -3 || exit 1
    $PY benchmarks/bench_cuda.py probe 2>&1 | tee "$OUT/probe.log"
    $PY -m pytest -q -p no:cacheprovider tests/emitters/cuda/test_cuda_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -15
    ;;
bench)
    $PY benchmarks/bench_cuda.py probe 2>&1 | tee "$OUT/probe.log"
    $PY benchmarks/bench_cuda.py bench --repeats ${REPEATS:-20} --out "$OUT" ${ONLY:+--only "$ONLY"} 2>&1 | tee "$OUT/bench.log"
    ;;
full)
    $PY benchmarks/bench_cuda.py verify --out "$OUT" 2>&1 | tee "$OUT/verify.log" | tail -3
    # memcheck of the kernels; host API errors are cuda-core's own probing (a cuCtxGetDevice it expects to fail)
    timeout 240 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 20 \
        $PY benchmarks/bench_cuda.py sanitize 2>&1 | tee "$OUT/memcheck.log" | tail -4
    $PY benchmarks/bench_cuda.py probe --out "$OUT" 2>&1 | tee "$OUT/probe.log"
    $PY benchmarks/bench_cuda.py bench --repeats ${REPEATS:-30} --out "$OUT" 2>&1 | tee "$OUT/bench.log"
    W=l1tex__data_pipe_lsu_wavefronts_mem_shared BC=l1tex__data_bank_conflicts_pipe_lsu_mem_shared I=smsp__sass_inst_executed_op_
    timeout 180 ncu --clock-control none --kernel-name regex:tr_gemm_mma --launch-count 1 \
        --metrics $BC.sum,${BC}_op_ld.sum,${BC}_op_st.sum,$W.sum,${W}_op_ld.sum,${W}_op_st.sum,${I}ldsm.sum,${I}shared_ld.sum,${I}shared_st.sum,${I}ldgsts.sum \
        $PY benchmarks/bench_cuda.py ncu-gemm 2>&1 | tee "$OUT/ncu_gemm.log" | tail -14
    timeout 260 $PY benchmarks/bench_cuda.py space --size ${SPACE_SIZE:-4096} --out "$OUT/space.json" 2>&1 \
        | tee "$OUT/space.log" | tail -3
    timeout 120 $PY -m pytest -q -p no:cacheprovider tests/emitters/cuda/test_cuda_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -5
    ;;
gemm)
    # the mma.sync GEMM work (issue 4): odd shapes of every variant, the GEMM schedules against cuBLAS, GPU
    # tests, Nsight Compute's shared-memory counters and warp states on the schedules named in NCU_SPECS
    $PY benchmarks/bench_cuda.py verify --out "$OUT" 2>&1 | tee "$OUT/verify.log" | tail -3
    timeout ${PROBE_S:-260} $PY benchmarks/bench_cuda.py gemm-probe --repeats ${REPEATS:-30} --out "$OUT" \
        2>&1 | tee "$OUT/gemm_probe.log"
    SPECS=${NCU_SPECS:-256,128,32,64,64,4}
    N=$(echo $SPECS | wc -w)
    W=l1tex__data_pipe_lsu_wavefronts_mem_shared BC=l1tex__data_bank_conflicts_pipe_lsu_mem_shared I=smsp__sass_inst_executed_op_
    timeout 120 ncu --clock-control none --kernel-name regex:tr_gemm_mma --launch-count $N \
        --metrics $BC.sum,${BC}_op_ld.sum,${BC}_op_st.sum,$W.sum,${W}_op_ld.sum,${W}_op_st.sum,${I}ldsm.sum,${I}shared_ld.sum,${I}shared_st.sum,${I}ldgsts.sum \
        $PY benchmarks/bench_cuda.py ncu-gemm $SPECS 2>&1 | tee "$OUT/ncu_gemm.log" | grep -E "tr_gemm|conflicts|wavefronts|inst_executed" | tail -44
    timeout 100 $PY -m pytest -q -p no:cacheprovider tests/emitters/cuda/test_cuda_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -8
    timeout 80 ncu --clock-control none --kernel-name regex:tr_gemm_mma --launch-count $N \
        --section WarpStateStats --section ComputeWorkloadAnalysis --section SpeedOfLight \
        $PY benchmarks/bench_cuda.py ncu-gemm $SPECS > "$OUT/ncu_stalls.log" 2>&1
    grep -E "tr_gemm|Stall|Throughput|Pipe|Issue" "$OUT/ncu_stalls.log" | head -60 > "$OUT/ncu_stalls_short.log"
    timeout 90 $PY benchmarks/bench_cuda.py bench --repeats 20 --only fp16 --out "$OUT/conv" 2>&1 | tee "$OUT/bench_conv.log" | tail -4
    grep -E "^[0-9]+ mma|odd shapes|FAILED|ERROR" "$OUT/gemm_probe.log" | tail -24
    ;;
epilogue)
    # run 08: odd shapes of every variant, then the GEMM schedules with the staged epilogue against the direct
    # one (and the hero's raster width) vs cuBLAS at 4096^3, 8192^3, 4000^3, then the GPU tests
    $PY benchmarks/bench_cuda.py verify --out "$OUT" 2>&1 | tee "$OUT/verify.log" | tail -2
    timeout ${PROBE_S:-300} $PY benchmarks/bench_cuda.py gemm-probe --repeats ${REPEATS:-30} --out "$OUT" \
        2>&1 | tee "$OUT/gemm_probe.log" | grep -E "FAILED|ERROR|NOT TIMED|odd shapes"
    timeout 100 $PY -m pytest -q -p no:cacheprovider -m gpu tests/emitters/cuda/test_cuda_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -4
    grep -E "^[0-9]+ mma" "$OUT/gemm_probe.log"
    ;;
space)
    $PY benchmarks/bench_cuda.py space --size ${SPACE_SIZE:-4096} --out "$OUT/space.json" 2>&1 | tee "$OUT/space.log" | tail -5
    ;;
esac
