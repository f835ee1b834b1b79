#!/usr/bin/env bash
# Issue 31 on one GPU: the prepared call compiled in C (tracea_cli/ops/_native_call.py) against the Python one
# and PyTorch's ops (host time per call, the call's parts, the GPU tests of the launch path), then the models:
# torchvision ResNet-50 with patch_conv2d (eager and CUDA graphs, batch 32 and 1), what makes its graph slow to
# launch (graph_launch_probe.py --resnet), and where the eager batch-32 forward's host time goes (cProfile).
#     STEP=host|models|all bash benchmarks/gpu/ops_compiled_call_checks.sh
# One file per step in $OUT (device.txt, tests.txt, host.txt, parts.txt, resnet.txt, probe.txt, profile.txt).
. benchmarks/gpu/gpu_run_env.sh
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  lscpu | grep -m1 "Model name"
  $PY -c "import os, sysconfig, torch; inc = sysconfig.get_paths()['include']; \
print('torch', torch.__version__, '| Python.h:', os.path.isfile(os.path.join(inc, 'Python.h')), inc)"; } \
  | tee -a "$RES/device.txt"
STEP=${STEP:-all}
run() {  # run NAME COMMAND...: the command's output appended to $RES/NAME.txt, then its exit status
  local name=$1; shift
  echo "=== $*" >> "$RES/$name.txt"
  timeout "${T:-300}" "$@" >> "$RES/$name.txt" 2>&1
  echo "rc=$?" >> "$RES/$name.txt"
}
if [ "$STEP" != models ]; then
  run tests $PY -m pytest -q -p no:cacheprovider -rfE --tb=short tests/ops/test_ops_native_call.py tests/ops/test_ops_gpu.py \
    tests/ops/test_ops_launch_on.py tests/emitters/cuda/test_cuda_launch_replay.py
  grep -E "passed|failed|^FAILED|^ERROR|rc=" "$RES/tests.txt" | tail -8
  for native in 1 0 1; do  # the compiled call, the Python call, the compiled call again (the host drifts)
    run host env TRACEA_NATIVE_LAUNCH=$native $PY benchmarks/bench_ops_host.py --cuda
  done
  run parts $PY benchmarks/gpu/ops_call_parts.py
  grep -vE "Warning|warn\(" "$RES/host.txt" | grep -E "^===|^\||rc=" | tail -40
  grep -E "^---|wall|compiled|Python|replay" "$RES/parts.txt"
fi
[ "$STEP" = host ] && exit 0
run resnet $PY benchmarks/gpu/ops_resnet50.py --batch 32 1
run probe $PY benchmarks/gpu/graph_launch_probe.py --resnet 1
run profile $PY benchmarks/gpu/ops_host_profile.py --torchvision --batch 32
grep -E "^\||rc=|host ms" "$RES/resnet.txt" "$RES/profile.txt" | tail -20
grep -E "^\|" "$RES/probe.txt" | head -70
