#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the held-out 12-channel conv at 0.67x (n4 c12 96^2 k32 5x5 s2) on the stem
# core: its whole stem space; two other small-channel convs with a sample of theirs. Each verified, then timed
# beside cuDNN.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 330 $PY benchmarks/gpu/stem_probe.py --shapes "4,12,96,32,5,2,2" --space -1 --repeats 30 > "$RES/stem_c12.txt" 2>&1
echo "rc=$?" >> "$RES/stem_c12.txt"; sort -t' ' -k1,1 "$RES/stem_c12.txt" | head -3; grep -E "hero|rc=" "$RES/stem_c12.txt"
awk '$NF ~ /^[0-9.]+$/ {print $NF, $0}' "$RES/stem_c12.txt" | sort -rn | head -12 | cut -d' ' -f2-
timeout 200 $PY benchmarks/gpu/stem_probe.py --shapes "2,8,64,16,3,1,1;16,4,128,32,3,2,1" --space 10 --repeats 30 \
    > "$RES/stem_other.txt" 2>&1; echo "rc=$?" >> "$RES/stem_other.txt"; cat "$RES/stem_other.txt"
