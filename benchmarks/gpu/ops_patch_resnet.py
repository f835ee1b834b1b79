"""A ResNet-50-shaped network of plain ``nn.Conv2d`` layers (bottleneck blocks, no torchvision), run by
PyTorch and then after ``tracea.ops.patch_conv2d(model)``: the outputs compared, the forward times printed
side by side (CUDA events, median of the repeats, after warm-up; the first patched forward builds the
kernels and is not timed), and how many convolutions ran a Tracea kernel or fell back, with the reasons.

    python benchmarks/gpu/ops_patch_resnet.py [--batch 32] [--dtype fp16|bf16] [--repeats 20] [--json FILE]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys

import torch
from torch import nn

import tracea

STAGES = ((64, 256, 3, 1), (128, 512, 4, 2), (256, 1024, 6, 2), (512, 2048, 3, 2))  # width, out, blocks, stride


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(cin, width, 1), nn.Conv2d(width, width, 3, stride, 1)
        self.c3 = nn.Conv2d(width, cout, 1)
        self.skip = nn.Conv2d(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        return torch.relu(self.c3(y) + (self.skip(x) if self.skip is not None else x))


def resnet50_convs() -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, cout, blocks, stride in STAGES:
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, cout, stride if i == 0 else 1))
            cin = cout
    return nn.Sequential(*layers)


def time_forward(model: nn.Module, x: torch.Tensor, repeats: int) -> float:
    """Median ms of a forward, timed as every GPU figure of the project is (baselines.time_torch: CUDA events,
    L2 flushed and the stream held before each start)."""
    from tracea.emitters.cuda.baselines import time_torch

    return time_torch(lambda: model(x), 3, repeats).p50_ms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    torch.manual_seed(0)
    model = resnet50_convs().cuda().to(dtype).eval()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=dtype)
    with torch.inference_mode():
        want = model(x).float()
        torch_ms = time_forward(model, x, args.repeats)
        patched = tracea.ops.patch_conv2d(model)
        tracea.ops.clear_cache()
        paths: collections.Counter[str] = collections.Counter()
        for mod in model.modules():
            if isinstance(mod, tracea.ops.TraceaConv2d):
                mod.register_forward_hook(lambda m, i, o: paths.update([str(tracea.ops.explain().path) + (
                    "" if tracea.ops.explain().path == "tracea" else f": {tracea.ops.explain().reason}")]))
        got = model(x).float()
        counts = dict(paths)
        tracea_ms = time_forward(model, x, args.repeats)
        tracea.ops.unpatch_conv2d(model)
    rel = ((got - want).norm() / want.norm()).item()
    row = {"batch": args.batch, "dtype": args.dtype, "convs": patched, "paths_first_forward": counts,
           "rel_err": rel, "torch_ms": torch_ms, "tracea_ms": tracea_ms, "speedup": torch_ms / tracea_ms,
           "device": torch.cuda.get_device_name()}
    print(json.dumps(row, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2)
    return 0 if rel < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
