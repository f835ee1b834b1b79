#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 17): conditional rescaling in the wgmma attention kernel (a row keeps its
# reference maximum while a tile's exceeds it by at most 8 in log2 units; O's rescale skipped): every wgmma
# attention GPU test, then the whole table with cuDNN / FlexAttention in the same run.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py \
    > "$RES/test_wgmma_attention.txt" 2>&1; echo "rc=$?" >> "$RES/test_wgmma_attention.txt"; tail -4 "$RES/test_wgmma_attention.txt"
timeout 330 $PY benchmarks/gpu/wgmma_attention_probe.py --warmup 10 --repeats 40 > "$RES/attn.txt" 2>&1
echo "rc=$?" >> "$RES/attn.txt"; cat "$RES/attn.txt"
