#!/usr/bin/env bash
# After a change of the IR's layout (the op files, their suites) or of the bench's timing defaults: the quick
# CUDA suite through `tracea bench` (its rows come from each op's own suites, sized for a device), then the
# GPU tests of the kernels, the launch path, the ops surface, export and the sanitizers on a fresh compile
# cache.
#     bash benchmarks/gpu/quick_suite_and_gpu_tests.sh
. benchmarks/gpu/gpu_run_env.sh   # TRACEA_HOME: a fresh folder unless one is given
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 150 $PY -m tracea bench --backend cuda --quick 2>&1 | tail -20 | tee "$RES/quick_suite.txt"
timeout 420 $PY -m pytest -q -p no:cacheprovider -k "not recorded_gpu_probe" \
  tests/test_cuda_gpu.py tests/test_ops_gpu.py tests/test_cuda_wgmma.py tests/test_cuda_wgmma_conv.py \
  tests/test_cuda_stem_gpu.py tests/test_simt_core_gpu.py tests/test_simt_split_gpu.py \
  tests/test_cuda_attention_gpu.py tests/test_cuda_wgmma_attention_gpu.py tests/test_cuda_cluster_n_gpu.py \
  tests/test_attention_flex_gpu.py tests/test_nan_propagation_gpu.py tests/test_export_gpu.py \
  tests/test_ops_compile_gpu.py tests/test_ops_native_call.py tests/test_cuda_modules.py \
  tests/test_hip_gpu.py tests/test_sanitizers_gpu.py 2>&1 | tail -25 | tee "$RES/gpu_tests.txt"
