"""Probe: the CPU conv2d's direct path (a strided filter's patches copied once, then read in place: pack_a off)
against its packed path (the patches gathered block by block) on strided 3x3 convolutions, each pair verified,
then timed in alternating blocks (timing.interleaved). What ``conv._strided_filter`` rests on.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_conv_strided.py
"""

from __future__ import annotations

import dataclasses
import importlib

from cpu_forms import timed_forms  # benchmarks/ (this script's folder)

from tracea.doctor import probe
from tracea.kernels import Conv2d

B = importlib.import_module("tracea.emitters.cpu.build")
host = probe()
v = "cpu-avx512.conv2d"
CASES = [(64, 56, 64), (128, 56, 128), (128, 56, 256), (256, 56, 256), (64, 112, 128), (32, 112, 64), (256, 28, 128),
         (256, 28, 256), (512, 14, 512)]
print(f"{host.cpu.model} ({host.cpu.vendor}), {v}")
for c, hw, k in CASES:
    op = Conv2d(1, c, hw, hw, k, 3, 3, stride=2, padding=1, layout="nhwc")
    s = B.hero_schedule(op, v, host)
    forms = {name: dataclasses.replace(s, pack_a=pa, pack_b=True) for name, pa in (("direct", False), ("packed", True))}
    t = timed_forms(op, v, forms, host, 1e-4, repeats=20, min_seconds=0.4, block=5, gap_s=0.01)
    print(f"c{c} {hw}x{hw} k{k} 3x3 stride 2, hero pack_a={s.pack_a} mr={s.mr}: direct {t['direct'].p50_ms:.3f} ms, "
          f"packed {t['packed'].p50_ms:.3f} ms ({t['packed'].p50_ms / t['direct'].p50_ms:.2f}x)", flush=True)
