#!/usr/bin/env bash
# Small outputs over a long K on a GPU, in one call (issue 34): the split-K GPU tests (every split form verified
# against float64 and repeated bit-identically, the spread fix-up over more slices than a thread's accumulator
# groups among them), compute-sanitizer (memcheck, racecheck, synccheck) over the spread cases, then the long-K
# forms beside the hero (benchmarks/gpu/long_k_split_forms.py, FORMS below).
#     [FORMS="a,b"] [DEADLINE=S] bash benchmarks/gpu/few_tiles_split_checks.sh
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 200 $PY -m pytest -q -p no:cacheprovider -rf tests/emitters/cuda/test_cuda_splitk.py \
  tests/emitters/cuda/test_cuda_gemm_heroes.py > "$RES/gpu_tests_split.txt" 2>&1
tail -3 "$RES/gpu_tests_split.txt"
sanitize split wgmma-splitk wgmma-spread-24 wgmma-spread-2
F=${FORMS:-"64x64 s8 auto spread,64x64 s5 auto spread,64x64 s12 auto spread,64x64 s8 k32 spread,64x64 s12 auto,64x128 s5 auto"}
$PY benchmarks/gpu/long_k_split_forms.py --forms "$F" --deadline ${DEADLINE:-240} > "$RES/long_k_split_forms.txt" 2>&1
cat "$RES/long_k_split_forms.txt"
