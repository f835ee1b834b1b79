"""Probe: the CPU conv2d's direct path (the input read in place, pack_a off) against its packed path on 1x1
convolutions whose pixels lie 4 KiB apart or not (1024 and 2048 fp32 channels against 1040 and 1008, and stride
2), each pair timed in alternating blocks (timing.interleaved). What ``conv._rows_alias`` rests on.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_conv_pitch.py
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np

from tracea.doctor import probe
from tracea.emitters.timing import interleaved
from tracea.kernels import Conv2d

B = importlib.import_module("tracea.emitters.cpu.build")
host = probe()
v = "cpu-avx512.conv2d"
CASES = [(1024, 14, 512, 1), (1040, 14, 512, 1), (1008, 14, 512, 1), (512, 28, 256, 1), (2048, 7, 512, 1),
         (1024, 14, 256, 1), (256, 56, 128, 1), (512, 28, 1024, 2), (256, 56, 512, 2), (1024, 14, 2048, 2)]
for c, hw, k, st in CASES:
    op = Conv2d(1, c, hw, hw, k, 1, 1, stride=st, layout="nhwc")
    s = B.hero_schedule(op, v, host)
    x = op.random_inputs(np.random.default_rng(0))
    out = np.empty(op.output_shape(), np.float32)
    ref = op.reference(x)
    fns = {}
    for pa in (False, True):
        kk = B.build(op, v, dataclasses.replace(s, pack_a=pa, pack_b=True), host)
        kk(x, out)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        assert err < 1e-4, f"c{c} pack_a={pa}: relative error {err}"
        fns["direct" if not pa else "packed"] = (lambda kk=kk, x=x, out=out: kk(x, out))
    t = interleaved(fns, repeats=20, min_seconds=0.4, block=5, gap_s=0.01)
    print(f"c{c} {hw}x{hw} k{k} stride {st}, hero pack_a={s.pack_a} mr={s.mr}: direct {t['direct'].p50_ms:.3f} ms, "
          f"packed {t['packed'].p50_ms:.3f} ms", flush=True)
