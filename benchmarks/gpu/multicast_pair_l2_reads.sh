#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): why a multicast pair reads more at the L2 than single blocks (Nsight
# Compute's L2 read sectors and requests, hits and misses, for the hero, the pair and 128x64 two-consumer
# forms; the multicast metrics this ncu has), and 128x64 two-consumer timings under two L2 promotions,
# alternated three times.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
ncu --query-metrics 2>/dev/null | grep -i -E "mcast|multicast|lrc|coalesc" | head -30 | tee "$RES/mcast_metrics.txt"
M=lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_bytes.sum,gpu__time_duration.sum
for f in hero pair "128x64 c2" "cuBLAS's"; do
  timeout 60 ncu --clock-control none --cache-control all -k regex:tr_wgmma -c 1 --metrics $M \
    $PY benchmarks/gpu/split_timeline.py --once "$f" > "$RES/ncu_${f// /_}.txt" 2>&1
  echo "== $f"; grep -E "lts__|gpu__time" "$RES/ncu_${f// /_}.txt" | awk '{print $1, $3}'
done
for i in 1 2 3; do for pr in L2_256B L2_128B; do
  echo "promotion $pr pass $i:"; timeout 60 $PY benchmarks/gpu/split_timeline.py --promotion $pr --no-timeline --only "hero,128x64 c2" 2>&1
done; done | tee "$RES/promotion.txt" | grep -v "^$"
