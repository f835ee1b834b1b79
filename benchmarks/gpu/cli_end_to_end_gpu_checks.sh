#!/usr/bin/env bash
# The end-to-end check of a GPU machine through the `tracea` command line, as a user runs it: the doctor,
# `tracea bench` on every CUDA variant the planner picks (Hopper wgmma GEMM and conv, SIMT, softmax),
# compute-sanitizer memcheck on the Hopper kernels, `tracea tune` on the CUDA backend, then pack-repro and
# replay of the tune run. Installs nothing: `tracea` is imported from this checkout through a folder of
# links mirroring pyproject's package-dir map (as cuda_emitter_gpu_checks.sh). Results under $OUT (default ./.out).
set -uo pipefail
FINAL=${OUT:-$PWD/.out}
mkdir -p "$FINAL"
W=$(mktemp -d /tmp/final.XXXX)
trap 'cp "$W"/*.txt "$W"/*.csv "$W"/*.tar.gz "$FINAL"/ 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh
T="$PY -m tracea"
B="--backend cuda --metrics $W/bench.csv"
{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
    $T doctor --plain | head -60
    set -x
    $T plan gemm --m 4096 --dtype bf16 --backend cuda
    $T bench gemm --m 4096 --dtype bf16 $B --repeat 30
    $T bench gemm --m 4096 --dtype fp16 $B --repeat 30
    $T bench gemm --m 8192 --dtype bf16 $B --repeat 20
    $T bench gemm --m 4097 --dtype bf16 $B --repeat 20
    $T bench gemm --m 4096 --dtype fp32 $B --repeat 20
    $T bench conv2d --n 1 --c 64 --h 224 --w 224 --k 128 --r 3 --s 3 --padding 1 --layout nhwc --dtype fp16 $B --repeat 30
    $T bench conv2d --n 32 --c 256 --h 56 --w 56 --k 256 --r 3 --s 3 --padding 1 --layout nhwc --dtype fp16 $B --repeat 30
    $T bench conv2d --n 1 --c 64 --h 224 --w 224 --k 128 --r 3 --s 3 --padding 1 --layout nchw --dtype fp32 $B --repeat 30
    $T bench softmax --rows 8192 --cols 8192 --dtype fp32 $B --repeat 30
    set +x
} > "$W/bench.txt" 2>&1
tail -c 6000 "$W/bench.txt"
{
    echo "== memcheck: every CUDA variant's small odd-shape cases (benchmarks/bench_cuda.py sanitize)"
    timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 10 \
        $PY benchmarks/bench_cuda.py sanitize 2>&1 | tail -30
    for args in "gemm --m 1000 --n 520 --k 264 --dtype bf16 --epilogue bias,gelu" \
                "conv2d --n 2 --c 64 --h 30 --w 30 --k 96 --r 3 --s 3 --padding 1 --stride 2 --layout nhwc --dtype fp16"; do
        echo "== memcheck: tracea bench $args"
        timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 10 \
            $T bench $args --backend cuda --repeat 1 --warmup 0 2>&1 | tail -8
    done
} > "$W/memcheck.txt" 2>&1
cat "$W/memcheck.txt"
{
    set -x
    $T tune gemm --m 2048 --dtype bf16 --backend cuda --budget 10 --no-tui --seed 1 --csv "$W/tune.csv"
    $T tune gemm --m 2048 --dtype bf16 --backend cuda --budget 10 --no-tui --seed 1
    $T bench gemm --m 2048 --dtype bf16 $B --repeat 20
    $T pack-repro -o "$W/tune-bundle.tar.gz"
    $T replay "$W/tune-bundle.tar.gz" --yes
    echo "replay rc=$?"
    set +x
} > "$W/tune.txt" 2>&1
tail -c 5000 "$W/tune.txt"
