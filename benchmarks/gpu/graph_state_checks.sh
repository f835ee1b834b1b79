#!/usr/bin/env bash
# Issue 31, after the finding that every CUDA graph of a process slows down once it has captured a few
# (graph_kernel_probe.py --order): the measurements redone with the graphs they compare timed in turns. One call:
# modules against functions and the carveout switch (graph_kernel_probe --distinct --switch), the batch-1 1x1
# schedules in graphs of ten against cuDNN (--forms), ResNet-50 at batch 1 and 32 in both orders
# (ops_resnet50.py), the host time of a repeated call (bench_ops_host.py --cuda), the GPU tests of the launch path
# and the Hopper kernels, and torch.compile against Inductor (ops_compile_models.py).
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 150 $PY benchmarks/gpu/graph_kernel_probe.py --distinct --switch 2>&1 | tee "$RES/modules_and_carveout_in_turns.txt"
timeout 200 $PY benchmarks/gpu/graph_kernel_probe.py --forms 2>&1 | tee "$RES/resnet_b1_1x1_schedules_in_turns.txt"
timeout 150 $PY benchmarks/gpu/ops_resnet50.py --batch 1 32 2>&1 | tee "$RES/resnet50_b1_then_b32.txt"
timeout 150 $PY benchmarks/gpu/ops_resnet50.py --batch 32 1 2>&1 | tee "$RES/resnet50_b32_then_b1.txt"
timeout 150 $PY benchmarks/bench_ops_host.py --cuda 2>&1 | tee "$RES/host_time_per_call.txt"
timeout 300 $PY -m pytest -q -p no:cacheprovider tests/ops/test_ops_native_call.py tests/ops/test_ops_gpu.py tests/emitters/cuda/test_cuda_gpu.py \
  tests/emitters/cuda/test_cuda_modules.py tests/emitters/cuda/test_cuda_wgmma.py tests/emitters/cuda/test_cuda_wgmma_conv1x1.py tests/emitters/cuda/test_cuda_wgmma_conv.py \
  -k "not recorded_gpu_probe" 2>&1 | tail -6 | tee "$RES/gpu_tests.txt"
timeout 300 $PY benchmarks/gpu/ops_compile_models.py 2>&1 | tee "$RES/compile_models.txt"
