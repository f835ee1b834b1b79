#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the stem core's hero now splits k over more warps where a block would have
# fewer than 4; eight small-channel convs where that rule applies, the new hero against the old (same pixels,
# no k split), each verified, then timed beside cuDNN; then the stem GPU tests.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 300 $PY - <<'PY' 2>&1 | tee "$RES/stem_rule.txt"
import dataclasses, sys
import numpy as np
sys.path.insert(0, "benchmarks/gpu")
from stem_probe import run
from tracea.doctor import probe
from tracea.emitters.cuda import stem
from tracea.emitters.device_baselines import time_torch, torch_baseline
from tracea.kernels import Conv2d

host = probe()
for n, c, hw, k, r, st in ((4, 12, 96, 32, 5, 2), (1, 12, 96, 32, 5, 2), (8, 4, 64, 32, 7, 2), (16, 8, 32, 64, 7, 1),
                           (16, 3, 96, 64, 7, 2), (8, 15, 96, 16, 3, 2), (1, 8, 32, 64, 5, 1), (1, 12, 64, 16, 5, 2)):
    op = Conv2d(n, c, hw, hw, k, r, r, stride=st, padding=r // 2, layout="nhwc", dtype="fp16")
    inputs = op.random_inputs(np.random.default_rng(7))
    ref = op.reference(inputs)
    base = torch_baseline(op, inputs)
    vendor = time_torch(base.run, 5, 30).p50_ms
    new = stem.hero_schedule(op, host)
    old = dataclasses.replace(new, warps=new.warps // new.ksplit, ksplit=1)
    for label, s in (("new", new), ("old", old)):
        status, err, ms, name = run(op, host, s, inputs, ref, 30)
        print(f"{op.signature[:80]:<80} {label} {name:<22} {status:<22} {ms and round(ms, 4)} ms  cuDNN {vendor:.4f} ms  "
              f"ratio {vendor / ms if ms else float('nan'):.2f}", flush=True)
PY
timeout 200 $PY -m pytest -q -m gpu -p no:cacheprovider tests/emitters/cuda/test_cuda_stem_gpu.py > "$RES/stem_pytest.txt" 2>&1
echo "rc=$?" >> "$RES/stem_pytest.txt"; tail -3 "$RES/stem_pytest.txt"
