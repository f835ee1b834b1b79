#!/usr/bin/env bash
# Boxes of 32 or 16 channels and filter-wide tiles on the Hopper conv's im2col path (issue 34), on one sm_90 GPU.
#     bash benchmarks/gpu/conv3x3_chunks_checks.sh first    # tests, forms at batch 8 (and 32), sanitizers
#     bash benchmarks/gpu/conv3x3_chunks_checks.sh compare  # the hero beside the rule before it, fitted and held out
# "first": the im2col path's GPU tests (every case verified against the float64 reference), every form of
# conv3x3_chunks.py beside the hero on the fitted shapes, then compute-sanitizer (memcheck, racecheck, synccheck) over
# the chunked cases and the odd-rows pair case of sanitize_cases.py. Logs in $OUT (else ./.out).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
case ${1:-first} in
first)
  timeout ${TEST_S:-150} $PY -m pytest -q -m gpu -p no:cacheprovider -rf tests/emitters/cuda/test_cuda_im2col.py \
    > "$RES/im2col_tests.txt" 2>&1
  echo "tests rc=$? $(tail -1 "$RES/im2col_tests.txt")"
  timeout ${FORMS_S:-240} $PY benchmarks/gpu/conv3x3_chunks.py --forms --batches ${BATCHES:-8,32} > "$RES/forms.txt" 2>&1
  echo "forms rc=$?"
  SAN_TIMEOUT=${SAN_TIMEOUT:-60} sanitize chunks ${SAN_CASES:-wgmma-conv3x3-k32-w96 wgmma-conv3x3-k16-w40 \
    wgmma-conv3x3-k32-split wgmma-conv1x1-off-line-odd}
  grep -hE " ok$| WRONG$" "$RES"/sanitize_chunks_*.txt | sort | uniq -c ;;
compare)
  timeout ${HELD_S:-250} $PY benchmarks/gpu/conv3x3_chunks.py --compare --held-out --batches ${BATCHES:-4,8,16,32,64} \
    > "$RES/held_out.txt" 2>&1
  echo "held-out rc=$?"
  timeout ${FIT_S:-200} $PY benchmarks/gpu/conv3x3_chunks.py --compare --batches ${BATCHES:-4,8,16,32,64} \
    > "$RES/fitted.txt" 2>&1
  echo "fitted rc=$?" ;;
esac
true
