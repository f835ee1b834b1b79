#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 17): the wgmma attention GPU tests and the table after conditional
# rescaling became head-dim-256 only, then the two seq-512 rows again (run-to-run change).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py \
    > "$RES/test_wgmma_attention.txt" 2>&1; echo "rc=$?" >> "$RES/test_wgmma_attention.txt"; tail -3 "$RES/test_wgmma_attention.txt"
timeout 280 $PY benchmarks/gpu/wgmma_attention_probe.py --warmup 10 --repeats 40 > "$RES/attn.txt" 2>&1
echo "rc=$?" >> "$RES/attn.txt"; cat "$RES/attn.txt"
timeout 90 $PY benchmarks/gpu/wgmma_attention_probe.py --match "s512" --warmup 10 --repeats 40 > "$RES/attn_s512.txt" 2>&1
echo "rc=$?" >> "$RES/attn_s512.txt"; cat "$RES/attn_s512.txt"
