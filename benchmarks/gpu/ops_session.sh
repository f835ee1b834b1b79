#!/usr/bin/env bash
# tracea.ops, torch.compile(backend="tracea") and `tracea export` (issue 18) on one GPU: their GPU tests,
# then the two ops benchmarks (ResNet-50 with patch_conv2d; the Llama MLP through torch.compile). Logs in $OUT.
#     TESTS="tests/test_ops_gpu.py" BENCH=0 bash benchmarks/gpu/ops_session.sh
. benchmarks/gpu/session_head.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$RES/device.txt"
$PY -c "import torch; print('torch', torch.__version__)" | tee -a "$RES/device.txt"
for t in ${TESTS:-tests/test_ops_gpu.py tests/test_ops_launch_on.py tests/test_export_gpu.py tests/test_ops_compile_gpu.py}; do
  name=$(basename $t .py)
  timeout ${TEST_TIMEOUT:-240} $PY -m pytest -q -m gpu -p no:cacheprovider $t > "$RES/$name.txt" 2>&1
  echo "rc=$?" >> "$RES/$name.txt"; tail -${TAIL:-6} "$RES/$name.txt"
done
[ "${BENCH:-1}" = 1 ] || exit 0
run() {  # name, script, args...
  local name=$1; shift
  timeout ${BENCH_TIMEOUT:-240} $PY "$@" --json "$RES/$name.json" > "$RES/$name.txt" 2> "$RES/$name.err"
  echo "rc=$?" >> "$RES/$name.txt"; cat "$RES/$name.txt"; tail -5 "$RES/$name.err"
}
run resnet benchmarks/gpu/ops_patch_resnet.py --batch 32 --dtype fp16
run mlp benchmarks/gpu/ops_compile_mlp.py
run mlp_graphs benchmarks/gpu/ops_compile_mlp.py --cudagraphs
