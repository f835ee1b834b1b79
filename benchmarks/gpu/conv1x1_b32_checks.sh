#!/usr/bin/env bash
# Split-K over three consumers on the Hopper conv's GEMM path (issue 34), in one call: 1. each refused form
# (three_consumer_split_forms.py 0-3, lifted in-process) launched once and verified, in its own process (a device
# fault ends a context); 2. if all four ran right, ResNet-50's batch-32 1x1 convs with those forms beside the
# heuristic and cuDNN (conv1x1_b32_forms.py --unrefused; without the flag otherwise); 3. compute-sanitizer memcheck,
# racecheck and synccheck over forms 0 (split 4) and 2 (split 2).
#     bash benchmarks/gpu/conv1x1_b32_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
ok=1
for i in 0 1 2 3; do
  timeout 60 $PY benchmarks/gpu/three_consumer_split_forms.py $i --unrefused --once >> "$RES/forms_once.txt" 2>&1
  rc=$?; echo "form $i rc=$rc"; [ $rc -eq 0 ] || ok=0
done
tail -4 "$RES/forms_once.txt" | cut -c1-160
flag=$([ $ok -eq 1 ] && echo --unrefused)
timeout 170 $PY benchmarks/gpu/conv1x1_b32_forms.py $flag > "$RES/conv1x1_b32_forms.txt" 2>&1
echo "forms ($flag) rc=$?"; cut -c1-170 "$RES/conv1x1_b32_forms.txt"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  for i in 2 0; do
    timeout 50 $SAN --tool $tool --report-api-errors no --print-limit 10 --error-exitcode 99 \
      $PY benchmarks/gpu/three_consumer_split_forms.py $i --unrefused --once > "$RES/sanitize_${tool}_form$i.txt" 2>&1
    echo "$tool form $i rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|WRONG' "$RES/sanitize_${tool}_form$i.txt" | tr '\n' ' ')"
  done
done
true
