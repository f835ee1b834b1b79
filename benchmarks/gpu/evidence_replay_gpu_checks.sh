#!/usr/bin/env bash
# The evidence path on a GPU (issue 8), from the repository root of a machine with an NVIDIA GPU:
#   bench a CUDA kernel with --dump-ir and --metrics, pack the run, replay the bundle from the bundled
#   source (NVRTC) and from the bundled cubin, draw the report (`replay FILE` mode: only replay a bundle made
#   earlier, both ways). Installs nothing: `tracea` is imported from
#   this checkout through a folder of links mirroring pyproject's package-dir map (as cuda_emitter_gpu_checks.sh).
# Results under $OUT (default ./.out): log.txt, the bundle, the metrics CSV, the plot, the IR dump (ir.tgz).
set -uo pipefail
FINAL=${OUT:-$PWD/.out}
mkdir -p "$FINAL"
W=$(mktemp -d /tmp/evidence.XXXX)
finish() {
    cp "$W"/log.txt "$W"/*.tar.gz "$W"/*.csv "$W"/*.png "$FINAL"/ 2>/dev/null
    tar czf "$FINAL/ir.tgz" -C "$W" ir 2>/dev/null
}
trap finish EXIT
export PYTHONUNBUFFERED=1 TRACEA_HOME=${TRACEA_HOME:-/tmp/tracea-home}
PY=${PYTHON:-python3}
. benchmarks/gpu/shim.sh
T="$PY -m tracea"
M=${M:-4096}
if [ "${1:-full}" = replay ]; then
    { $T replay "$2" --yes --repeat 20; echo "replay rc=$?"; $T replay "$2" --yes --binary --repeat 20
      echo "replay --binary rc=$?"; } > "$W/log.txt" 2>&1
    tail -60 "$W/log.txt"
    exit 0
fi
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    command -v cuobjdump nvdisasm
    set -x
    $T bench gemm --backend cuda --dtype bf16 --m 2048 --metrics "$W/gpu.csv" --repeat 20
    $T bench gemm --backend cuda --dtype bf16 --m "$M" --dump-ir "$W/ir" --metrics "$W/gpu.csv" --repeat 20
    $T pack-repro -o "$W/cuda-bundle.tar.gz"
    $T replay "$W/cuda-bundle.tar.gz" --yes --repeat 20
    echo "replay rc=$?"
    $T replay "$W/cuda-bundle.tar.gz" --yes --binary --repeat 20
    echo "replay --binary rc=$?"
    $T report "$W/gpu.csv" --plot "$W/gpu.png"
    set +x
    ls -l "$W"/ir/*
    head -40 "$W"/ir/*/07_metadata.yaml
    head -30 "$W"/ir/*/06_resources.txt
} > "$W/log.txt" 2>&1
tail -80 "$W/log.txt"
