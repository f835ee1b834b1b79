"""Probe: the CPU conv2d's strided direct path (ResNet-50's stem and other strided filters, batch 1) with its
patches built all at once (7.4 MB for the stem) against built a chunk of pixels at a time, in cache, before each
chunk's GEMM (``conv_direct.IM2COL_CHUNK``); oneDNN's conv (torch, channels_last) timed in the same alternating
blocks (timing.interleaved) as the reference. Every form is verified first. What ``IM2COL_CHUNK`` rests on.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/probe_cpu_stem_im2col_chunks.py
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from tracea.doctor import probe
from tracea.emitters.timing import interleaved
from tracea.kernels import Conv2d

B = importlib.import_module("tracea.emitters.cpu.build")
D = importlib.import_module("tracea.emitters.cpu.conv_direct")
host = probe()
v = "cpu-avx512.conv2d"
CHUNKS = (0, 256 << 10, 512 << 10, 1 << 20, 2 << 20)
CASES = [Conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="nhwc"),
         Conv2d(1, 64, 56, 56, 64, 3, 3, stride=2, padding=1, layout="nhwc"),
         Conv2d(1, 256, 28, 28, 256, 3, 3, stride=2, padding=1, layout="nhwc")]


def torch_conv(op, x):
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    xt = torch.from_numpy(x["x"]).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    wt = torch.from_numpy(x["weight"]).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    want = op.reference(x)
    got = torch.nn.functional.conv2d(xt, wt, stride=op.stride, padding=op.padding).permute(0, 2, 3, 1).numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-4, "oneDNN's output is wrong"
    return lambda: torch.nn.functional.conv2d(xt, wt, stride=op.stride, padding=op.padding)


for op in CASES:
    s = B.hero_schedule(op, v, host)
    x = op.random_inputs(np.random.default_rng(0))
    out = np.empty(op.output_shape(), np.float32)
    ref = op.reference(x)
    fns = {}
    for chunk in CHUNKS:
        D.IM2COL_CHUNK = chunk  # read when the source renders
        k = B.build(op, v, s, host)
        k(x, out)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        assert err < 1e-4, f"chunk {chunk}: relative error {err}"
        fns[f"chunk {chunk >> 10} KiB" if chunk else "all at once"] = (lambda k=k, x=x, out=out: k(x, out))
    D.IM2COL_CHUNK = 0
    try:
        fns["oneDNN"] = torch_conv(op, x)
    except ImportError:
        pass
    t = interleaved(fns, repeats=20, min_seconds=0.4, block=5, gap_s=0.01)
    base = t["all at once"].p50_ms
    print(f"{op.signature[:70]} (pack_a={s.pack_a}, mr={s.mr}, nr={s.nr}):", flush=True)
    for name, r in t.items():
        print(f"  {name:14s} {r.p50_ms:.3f} ms (p95 {r.p95_ms:.3f})  all-at-once / this {base / r.p50_ms:.2f}",
              flush=True)
