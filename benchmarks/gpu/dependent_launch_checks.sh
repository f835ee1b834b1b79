#!/usr/bin/env bash
# Issue 31: the Hopper GEMM/conv kernels launched as programmatic dependents (griddepcontrol.wait after their
# set-up; cuLaunchKernelEx). One GPU call: ResNet-50's graphs with and without dependent launches beside
# PyTorch's (logits checked on fresh inputs; timed in turns), ResNet-50 as ops_resnet50.py times it, the GPU tests
# of the launch path and the Hopper kernels, and compute-sanitizer (memcheck, racecheck, synccheck) over every
# kernel family (tests/test_sanitizers_gpu.py).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 240 $PY benchmarks/gpu/graph_kernel_probe.py --dependent 2>&1 | grep -v Warn | tee "$RES/dependent_graphs.txt"
timeout 200 $PY benchmarks/gpu/ops_resnet50.py --batch 1 32 2>&1 | tee "$RES/resnet50.txt"
timeout 420 $PY -m pytest -q -p no:cacheprovider tests/test_cuda_launch_replay.py tests/test_ops_native_call.py \
  tests/test_ops_gpu.py tests/test_cuda_gpu.py tests/test_cuda_wgmma_conv1x1.py tests/test_cuda_wgmma_conv.py \
  tests/test_cuda_modules.py tests/test_sanitizers_gpu.py 2>&1 | tail -15 | tee "$RES/gpu_tests.txt"
