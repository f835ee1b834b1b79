"""How long the host takes to launch a CUDA graph of Tracea kernels against one of PyTorch's: for each of a
few batch-1 ResNet-50 convolutions (a 1x1 on the GEMM kernel, a 3x3 with split-K scratch, the 7x7 stem), a
graph of ``--calls`` calls of ``tracea.ops.conv2d`` and one of ``F.conv2d`` on the same tensors; printed:
the host time of ``replay()`` (median of 20, the GPU drained in between) and the device time of a replay.
A patched ResNet-50 at batch 1 took 63-74 us of host time to launch its graph against PyTorch's 5-7 us
(``ops_resnet50.py --kernels``): this says which kernels make a graph slow to launch.

    python benchmarks/gpu/graph_launch_probe.py [--calls 50]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import tracea

CASES = {  # (x NCHW shape, out channels, kernel, stride, padding)
    "1x1 56x56 64->256 (GEMM kernel)": ((1, 64, 56, 56), 256, 1, 1, 0),
    "3x3 s2 56x56 128 (split-K scratch)": ((1, 128, 56, 56), 128, 3, 2, 1),
    "7x7 s2 stem 3->64": ((1, 3, 224, 224), 64, 7, 2, 3),
}


def probe(fn, calls: int) -> tuple[float, float]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    host, dev = [], []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t = time.perf_counter()
        g.replay()
        host.append((time.perf_counter() - t) * 1e6)
        b.record()
        b.synchronize()
        dev.append(a.elapsed_time(b) * 1e3)
    return statistics.median(host), statistics.median(dev)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args(argv)
    h = torch.float16
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; a graph of {args.calls} calls: host time "
          "of replay(), us; device time of a replay, us\n")
    print("| conv | side | kernel | replay() host | replay device |")
    print("|---|---|---|---|---|")
    with torch.inference_mode():
        for label, (shape, k, r, s, p) in CASES.items():
            x = torch.randn(*shape, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
            w = torch.randn(k, shape[1], r, r, device="cuda", dtype=h).contiguous(memory_format=torch.channels_last)
            ours = lambda x=x, w=w, s=s, p=p: tracea.ops.conv2d(x, w, None, s, p)  # noqa: E731
            theirs = lambda x=x, w=w, s=s, p=p: F.conv2d(x, w, None, s, p)  # noqa: E731
            ours()
            kernel = tracea.ops.explain().kernel
            for side, fn, name in (("tracea", ours, kernel), ("torch", theirs, "cuDNN")):
                hu, du = probe(fn, args.calls)
                print(f"| {label} | {side} | {name} | {hu:.1f} | {du:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
