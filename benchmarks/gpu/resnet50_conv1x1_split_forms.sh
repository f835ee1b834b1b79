#!/usr/bin/env bash
# One H100 call (2026-11-26, issue 16): the suite's one row at 0.80x, ResNet-50's 1x1 conv n1 c2048 7x7 k512 (a
# 49 x 512 x 2048 GEMM on the gemm path, split 8 ways at 4 k steps a slice): its hero beside fewer and more
# slices, wider tiles and evict-first loads, three passes.
. benchmarks/gpu/gpu_run_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RES/device.txt"
timeout 300 $PY - <<'PY' 2>&1 | tee "$RES/conv_forms.txt"
import dataclasses, sys
sys.path.insert(0, "benchmarks/gpu")
from split_probe import _row, pinned
from tracea.doctor import probe
from tracea.emitters.cuda.hopper.conv_heroes import conv_hero_schedule
from tracea.emitters.cuda.hopper.schedule import WgmmaConvSchedule, WgmmaSchedule
from tracea.kernels import Conv2d

host = probe()
for c, hw, k in ((2048, 7, 512), (1024, 14, 256), (512, 7, 2048)):
    op = Conv2d(1, c, hw, hw, k, 1, 1, layout="nhwc", dtype="fp16")
    hero = conv_hero_schedule(op)
    g = WgmmaConvSchedule.of_gemm
    forms = [hero] + [dataclasses.replace(hero, split=s) for s in (2, 4, 16)] + [
        dataclasses.replace(hero, split=4, stages=5, l2_hint="first"),
        g(WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=0)),
        g(WgmmaSchedule(bm=64, bn=128, stages=6, consumers=1, store="tma", split=4)),
        g(WgmmaSchedule(bm=128, bn=64, stages=8, consumers=2, raster="n", store="tma", split=0)),
        dataclasses.replace(hero, split_fix="spread")]
    for rep in range(3):
        print(op.signature, "pass", rep + 1, flush=True)
        for f in dict.fromkeys(forms):
            try:
                f.validate(op)
            except Exception as exc:  # noqa: BLE001
                print("  skip", f.name, exc)
                continue
            _row("hero" if f == hero else "form", pinned(op, host, f), f.name)
PY
