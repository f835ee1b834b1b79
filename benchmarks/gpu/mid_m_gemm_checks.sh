#!/usr/bin/env bash
# The GEMM tiles of gemm_heroes.one_wave and many_waves (issue 34: 33-512 rows) on one sm_90 GPU, in one call; PARTS
# picks some (default all):
#   compare   the hero beside the heuristic before the rules (benchmarks/gpu/mid_m_gemm_forms.py --compare) on the
#             fitted, held-out, check and many-waves shapes (every row verified, then timed beside cuBLAS)
#   suite     `tracea bench --suite llm-gemm --backend cuda`
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck over the one-wave and many-waves cases of
#             sanitize_cases.py (gpu_run_env.sh's sanitize)
#   tests     the Hopper GEMM's GPU tests
#     PARTS="compare suite" bash benchmarks/gpu/mid_m_gemm_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
PARTS=${PARTS:-compare suite sanitize tests}
if [[ " $PARTS " == *" compare "* ]]; then
  for set in fitted held-out check many-waves many-waves-check; do
    timeout 200 $PY benchmarks/gpu/mid_m_gemm_forms.py --compare --set $set --deadline 150 > "$RES/compare_$set.txt" 2>&1
    echo "compare $set rc=$?"
  done
fi
if [[ " $PARTS " == *" suite "* ]]; then
  COLUMNS=200 timeout 200 $PY -m tracea bench --backend cuda --suite llm-gemm --metrics "$RES/suite_llm_gemm.jsonl" \
    > "$RES/suite_llm_gemm.txt" 2> "$RES/suite_llm_gemm.err"
  echo "suite rc=$?"; grep -E "x4096 |x11008 |x14336 |geometric" "$RES/suite_llm_gemm.txt" | cut -c1-150
fi
if [[ " $PARTS " == *" sanitize "* ]]; then
  SAN_TIMEOUT=200 sanitize mid_m wgmma-one-wave-64x64 wgmma-one-wave-64x256 wgmma-one-wave-128x192 \
    wgmma-many-waves-64x256 wgmma-many-waves-128x192
  grep -hE " ok$| WRONG$" "$RES"/sanitize_mid_m_*.txt | sort | uniq -c
fi
if [[ " $PARTS " == *" tests "* ]]; then
  timeout 240 $PY -m pytest -q -p no:cacheprovider -rf -n 8 tests/emitters/cuda/test_cuda_gpu.py \
    tests/emitters/cuda/test_cuda_wgmma_swap_gpu.py > "$RES/gpu_tests.txt" 2>&1
  echo "tests rc=$?"; tail -3 "$RES/gpu_tests.txt"
fi
true
