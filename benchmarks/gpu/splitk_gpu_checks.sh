#!/usr/bin/env bash
# Split-K on the Hopper kernels (issue 16), on one sm_90 GPU: the GPU tests of every split form (verified
# against float64, repeated bit-identically) and of the Hopper kernels as before, then split_probe.py
# (heuristic vs no split vs alternatives, each beside the vendor library). Logs in $OUT.
#
#     bash benchmarks/gpu/splitk_gpu_checks.sh [PROBE ARGS...]
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
timeout 240 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_splitk.py \
    "tests/emitters/cuda/test_cuda_gpu.py::test_kernel_matches_the_reference_on_odd_shapes" > "$RES/pytest.txt" 2>&1
echo "rc=$?" >> "$RES/pytest.txt"; tail -15 "$RES/pytest.txt"
timeout ${PROBE_TIMEOUT:-330} $PY benchmarks/gpu/split_probe.py "$@" > "$RES/probe.txt" 2> "$RES/probe.err"
echo "rc=$?" >> "$RES/probe.txt"; cat "$RES/probe.txt"; tail -5 "$RES/probe.err"
