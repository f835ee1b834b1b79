#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): inside the split-K fix-ups (stamps at each phase), and each form again
# with spinning barrier waits (test_wait instead of try_wait) to see whether waiting warps wake late; the
# tests that failed in splitk_ticket_first_fixups.sh's run (the wgmma harness now passes split-K arguments;
# the stride-2 1x1 test takes the im2col path the conv hero now plans).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
mkdir -p "$RES/stamps"
timeout 300 $PY benchmarks/gpu/split_timeline.py --spin --out "$RES/stamps" > "$RES/timeline.txt" 2>&1
echo "rc=$?" >> "$RES/timeline.txt"; cat "$RES/timeline.txt"
timeout 250 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_wgmma.py tests/emitters/cuda/test_cuda_conv1x1.py \
    > "$RES/pytest.txt" 2>&1; echo "rc=$?" >> "$RES/pytest.txt"; tail -5 "$RES/pytest.txt"
