#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the fp32 SIMT GEMM's lane-filled forms (simt.FILL_FORMS) against the
# hero and its snake-order form, verified then timed against torch (TF32 off); their GPU tests.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 330 $PY benchmarks/gpu/simt_odd.py --compare > "$RES/simt_compare.txt" 2>&1
echo "rc=$?" >> "$RES/simt_compare.txt"; cat "$RES/simt_compare.txt"
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_simt_core_gpu.py -k "_cl or _cs or every_form_on_an_odd_shape" \
    > "$RES/test_simt.txt" 2>&1; echo "rc=$?" >> "$RES/test_simt.txt"; tail -4 "$RES/test_simt.txt"
