#!/usr/bin/env bash
# Issue 31, batch-1 ResNet-50 in a CUDA graph: the kernels loaded once per distinct cubin (emitters/cuda/modules.py)
# against the commit before it, on one machine. Run from a clean export of the commit under test, with the
# export of the commit before it at $OLD:
#   OLD=../.gpu_old bash benchmarks/gpu/graph_module_sharing_checks.sh
# Each side in turn, twice (old, new, old, new): the graphs' kernels (graph_kernel_probe.py --attrs), the graphs'
# launch and device time (graph_launch_probe.py --resnet 1, the whole-model rows), ResNet-50 at batch 1 and 32
# (ops_resnet50.py). Then, on this commit only: modules against functions (--distinct), the carveout rows, and
# the GPU tests of the launch path.
. benchmarks/gpu/gpu_run_env.sh
OLD=${OLD:?the export of the commit before}
NEW=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
for pass in 1 2; do
  for side in old new; do
    dir=$NEW; [ $side = old ] && dir=$OLD
    echo "=== pass $pass, $side ($dir)" | tee -a "$RES/ab_$side.txt"
    (cd "$dir" && . benchmarks/gpu/shim.sh && \
      timeout 150 $PY "$NEW/benchmarks/gpu/graph_kernel_probe.py" --attrs 2>&1 | grep -E "^---" ; \
      timeout 200 $PY "$NEW/benchmarks/gpu/graph_launch_probe.py" --resnet 1 2>&1 | sed -n '1,9p' ; \
      timeout 200 $PY benchmarks/gpu/ops_resnet50.py --batch 1 32 2>&1 | tail -12) 2>&1 | tee -a "$RES/ab_$side.txt"
  done
done
. benchmarks/gpu/shim.sh
timeout 200 $PY benchmarks/gpu/graph_kernel_probe.py --distinct --carveout 2>&1 | tee "$RES/distinct_carveout.txt"
timeout 300 $PY -m pytest -q -x tests/emitters/cuda/test_cuda_modules.py tests/ops/test_ops_gpu.py tests/emitters/cuda/test_cuda_gpu.py \
  tests/ops/test_ops_native_call.py tests/emitters/cuda/test_cuda_wgmma.py tests/emitters/cuda/test_cuda_wgmma_conv1x1.py 2>&1 | tail -15 | tee "$RES/gpu_tests.txt"
