#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): l2_hint "first" (evict-first operand loads) as a schedule field: its GPU
# tests (the split-K file: the tail shape at 5 stages, multicast pairs along M and N, fused epilogues),
# then every split hero (GEMMs and ResNet-50's batch-1 1x1 convs) and six other shapes beside itself with
# the hint, at its own depth and at 5 stages.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py > "$RES/pytest.txt" 2>&1
echo "rc=$?" >> "$RES/pytest.txt"; tail -3 "$RES/pytest.txt"
timeout 350 $PY benchmarks/gpu/split_probe.py --hint > "$RES/hint.txt" 2>&1; echo "rc=$?" >> "$RES/hint.txt"
cat "$RES/hint.txt"
