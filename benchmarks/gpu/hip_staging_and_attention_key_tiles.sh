#!/usr/bin/env bash
# One H100 call (2026-11-26): the HIP kernels' logic rerun after B's staging order, fp32 pads and dynamic LDS
# changed (issue 19); issue 17's two short-sequence rows against key-tile and ring-depth alternatives of the
# hero (d256: 32- and 48-key tiles, deeper rings; d64: 64/96-key tiles, deeper rings), cuDNN in the same run.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
timeout 300 $PY -m pytest -q -m gpu -p no:cacheprovider -rs tests/emitters/hip/test_hip_gpu.py \
    > "$RES/test_hip_gpu.txt" 2>&1; echo "rc=$?" >> "$RES/test_hip_gpu.txt"; tail -4 "$RES/test_hip_gpu.txt"
D256='bk=32,stages=2;bk=32,stages=3;bk=32,stages=4;bk=32,stages=5;bk=48,stages=2;bk=48,stages=3;bk=32,stages=4,intra=true;bk=48,stages=3,intra=true;consumers=1,pingpong=false;bk=32,stages=4,persistent=true'
D64='bk=64,stages=4;bk=64,stages=6;bk=64,stages=8;bk=96,stages=4;bk=128,stages=6;q_buffers=1;bk=64,stages=8,intra=false'
for pass in 1 2; do
timeout 150 $PY benchmarks/gpu/wgmma_attention_probe.py --match "d256 b16" --alts "$D256" --warmup 10 --repeats 40 \
    > "$RES/d256_$pass.txt" 2>&1; echo "rc=$?" >> "$RES/d256_$pass.txt"; cat "$RES/d256_$pass.txt"
timeout 120 $PY benchmarks/gpu/wgmma_attention_probe.py --match "d64 b16 h32 s512" --alts "$D64" --warmup 10 --repeats 40 \
    > "$RES/d64_$pass.txt" 2>&1; echo "rc=$?" >> "$RES/d64_$pass.txt"; cat "$RES/d64_$pass.txt"
done
