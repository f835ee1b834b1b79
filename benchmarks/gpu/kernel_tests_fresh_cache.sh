#!/usr/bin/env bash
# The GPU tests of the CUDA kernels, HIP's kernels run on an NVIDIA GPU, the launch path and the sanitizers, on a
# fresh compile cache (every kernel compiled by this commit's NVRTC call): what a change of the emitters' host
# side (renderers, store writers, the NVRTC module) is checked by, with the render hashes holding the sources.
#     bash benchmarks/gpu/kernel_tests_fresh_cache.sh
. benchmarks/gpu/gpu_run_env.sh   # TRACEA_HOME: a fresh folder unless one is given
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 540 $PY -m pytest -q -p no:cacheprovider -k "not recorded_gpu_probe" \
  tests/emitters/cuda/test_cuda_wgmma.py tests/emitters/cuda/test_cuda_wgmma_conv.py tests/emitters/cuda/test_cuda_wgmma_conv1x1.py tests/emitters/cuda/test_cuda_compile.py \
  tests/emitters/cuda/test_cuda_gpu.py tests/ops/test_ops_gpu.py tests/emitters/hip/test_hip_gpu.py tests/emitters/cuda/test_cuda_stem_gpu.py \
  tests/emitters/cuda/test_simt_core_gpu.py tests/emitters/cuda/test_simt_split_gpu.py tests/emitters/cuda/test_cuda_attention_gpu.py \
  tests/ops/test_ops_native_call.py tests/emitters/cuda/test_cuda_modules.py tests/emitters/cuda/test_sanitizers_gpu.py 2>&1 | tail -25 \
  | tee "$RES/gpu_tests.txt"
