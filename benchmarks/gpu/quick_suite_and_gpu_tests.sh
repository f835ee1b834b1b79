#!/usr/bin/env bash
# After a change of the IR's layout (the op files, their suites), of the bench's timing defaults or of the NVRTC
# call: the quick CUDA suite through `tracea bench` (its rows come from each op's own suites, sized for a
# device), then the GPU tests of the kernels, the launch path, the ops surface, export and attention on a fresh
# compile cache, in two parts whose whole output is kept ($RES/gpu_tests_*.txt), so that a part cut by its time
# limit still shows how far it got. The sanitizer tests are benchmarks/gpu/kernel_tests_fresh_cache.sh's.
#     bash benchmarks/gpu/quick_suite_and_gpu_tests.sh
. benchmarks/gpu/gpu_run_env.sh   # TRACEA_HOME: a fresh folder unless one is given
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 60 $PY -m tracea bench --backend cuda --quick 2>&1 | tail -20 | tee "$RES/quick_suite.txt"
timeout 220 $PY -m pytest -q -p no:cacheprovider -rf -k "not recorded_gpu_probe" \
  tests/emitters/cuda/test_cuda_wgmma.py tests/emitters/cuda/test_cuda_splitk.py tests/emitters/cuda/test_cuda_compile.py tests/emitters/cuda/test_cuda_gpu.py \
  tests/ops/test_ops_gpu.py tests/emitters/cuda/test_cuda_wgmma_conv.py tests/emitters/cuda/test_cuda_stem_gpu.py > "$RES/gpu_tests_kernels_and_ops.txt" 2>&1
timeout 300 $PY -m pytest -q -p no:cacheprovider -rf \
  tests/emitters/cuda/test_simt_core_gpu.py tests/emitters/cuda/test_simt_split_gpu.py tests/emitters/cuda/test_cuda_attention_gpu.py \
  tests/emitters/cuda/test_cuda_wgmma_attention_gpu.py tests/emitters/cuda/test_cuda_cluster_n_gpu.py tests/emitters/test_attention_flex_gpu.py \
  tests/emitters/test_nan_propagation_gpu.py tests/export/test_export_gpu.py tests/ops/test_ops_compile_gpu.py \
  tests/ops/test_ops_native_call.py tests/emitters/cuda/test_cuda_modules.py > "$RES/gpu_tests_attention_export_launch.txt" 2>&1
grep -hE "^FAILED|passed|failed" "$RES"/gpu_tests_*.txt | cut -c1-200
