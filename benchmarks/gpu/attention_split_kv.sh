#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 17): K and V released apart (split_kv) in the wgmma attention kernel:
# verified on the GPU test cases, then d256 at seq 512 and 16384 (causal) against the hero and cuDNN.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 240 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py -k "apart or hero" \
    > "$RES/test_split_kv.txt" 2>&1; echo "rc=$?" >> "$RES/test_split_kv.txt"; tail -4 "$RES/test_split_kv.txt"
ALTS='split_kv=true;stages=1,split_kv=true;bk=128,stages=1,split_kv=true'
for pass in 1 2; do
timeout 150 $PY benchmarks/gpu/wgmma_attention_probe.py --match "d256 b16" --alts "$ALTS" --warmup 10 --repeats 40 \
    > "$RES/d256_$pass.txt" 2>&1; echo "rc=$?" >> "$RES/d256_$pass.txt"; cat "$RES/d256_$pass.txt"
done
timeout 150 $PY benchmarks/gpu/wgmma_attention_probe.py --match "d256 b1 h32 s16384" --alts "$ALTS" --warmup 5 --repeats 20 \
    > "$RES/d256_long.txt" 2>&1; echo "rc=$?" >> "$RES/d256_long.txt"; cat "$RES/d256_long.txt"
timeout 120 $PY benchmarks/gpu/wgmma_attention_probe.py --match "d128 b4 h32 s4096" --alts "intra=false,bk=128,stages=1,split_kv=true" \
    --warmup 5 --repeats 20 > "$RES/d128.txt" 2>&1; echo "rc=$?" >> "$RES/d128.txt"; cat "$RES/d128.txt"
