"""Where the host time of a patched model's forward goes: ResNet-50's convs (ops_patch_resnet.py's network,
channels_last, fp16; ``--torchvision``: torchvision's ResNet-50 as users have it) after patch_conv2d, the host
time of a forward (queued, not waited for) beside plain PyTorch's, then cProfile over a few forwards, the
functions by own time.

    python benchmarks/gpu/ops_host_profile.py [--batch 32] [--forwards 10] [--nchw] [--torchvision]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import torch
from ops_patch_resnet import resnet50_convs

import tracea


def host_ms(model: torch.nn.Module, x: torch.Tensor, n: int) -> float:
    """Median host time of queueing one forward (the GPU drained before each)."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model(x)
        times.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--forwards", type=int, default=10)
    ap.add_argument("--nchw", action="store_true")
    ap.add_argument("--torchvision", action="store_true", help="torchvision's resnet50 (BN, ReLU, pooling too)")
    args = ap.parse_args(argv)
    if args.torchvision:
        import torchvision

        model = torchvision.models.resnet50(weights=None).cuda().half().eval()
    else:
        model = resnet50_convs().cuda().half().eval()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=torch.float16)
    if not args.nchw:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        print(f"torch host ms per forward: {host_ms(model, x, args.forwards):.3f}")
        tracea.ops.patch_conv2d(model)
        for _ in range(3):
            model(x)
        print(f"tracea host ms per forward: {host_ms(model, x, args.forwards):.3f}")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.forwards):
            model(x)
        prof.disable()
        torch.cuda.synchronize()
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
