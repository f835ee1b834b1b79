"""A ResNet-50-shaped network of plain ``nn.Conv2d`` layers (bottleneck blocks, no torchvision), run by
PyTorch and then after ``tracea.ops.patch_conv2d(model)``: the outputs compared, the forward times printed
side by side (CUDA events, median of the repeats, after warm-up; the first patched forward builds the
kernels and is not timed), and how many convolutions ran a Tracea kernel or fell back, with the reasons.

    python benchmarks/gpu/ops_patch_resnet.py [--batch 32] [--dtype fp16|bf16] [--channels-last] [--layers]
        [--repeats 20] [--json FILE]

``--channels-last``: the model and input in channels_last memory (the kernels read NHWC in place; NCHW
costs a transpose of x, the filter and the result per call). ``--layers``: each distinct convolution alone,
F.conv2d against tracea.ops.conv2d on the same tensors, with the variant that ran (where the time goes): timed
alone (L2 flushed, the stream held), and inside a CUDA graph of 20 back-to-back calls (warm L2, as in a captured
model).

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
    from tracea.emitters.device_baselines import time_torch

    return time_torch(lambda: model(x), 3, repeats).p50_ms


def in_graph_us(fn, calls: int = 20, replays: int = 10) -> float:
    """Microseconds a call of ``fn`` takes inside a CUDA graph of ``calls`` back-to-back calls on the same
    tensors (warm L2, no launch gaps but the graph's own: as in a captured model), median of ``replays``:
    the timing ``torch.compile(backend="tracea")`` chooses nodes by under graph trees."""
    from tracea.ops.compile_choice import _graph_ms

    return _graph_ms(fn, torch.device("cuda"), replays, calls) * 1e3


def layer_table(model: nn.Module, x: torch.Tensor, repeats: int) -> list[dict]:
    """Each distinct Conv2d of ``model`` (by shape) timed alone on its real input: F.conv2d and tracea.ops."""
    from tracea.emitters.device_baselines import time_torch

    seen: dict[tuple, tuple[nn.Conv2d, torch.Tensor]] = {}

    def grab(mod: nn.Module, inp: tuple, _out: torch.Tensor) -> None:
        key = (tuple(inp[0].shape), mod.out_channels, mod.kernel_size, mod.stride, mod.padding)
        seen.setdefault(key, (mod, inp[0]))

    hooks = [m.register_forward_hook(grab) for m in model.modules() if isinstance(m, nn.Conv2d)]
    model(x)
    for h in hooks:
        h.remove()
    rows = []
    F = torch.nn.functional
    for key, (mod, inp) in seen.items():
        w, b = mod.weight, mod.bias

        def ours(mod=mod, inp=inp, w=w, b=b) -> torch.Tensor:
            return tracea.ops.conv2d(inp, w, b, mod.stride, mod.padding)

        def theirs(mod=mod, inp=inp, w=w, b=b) -> torch.Tensor:
            return F.conv2d(inp, w, b, mod.stride, mod.padding)

        want = theirs().float()
        got = ours().float()
        route = tracea.ops.explain()
        t_ours, t_theirs = time_torch(ours, 3, repeats), time_torch(theirs, 3, repeats)
        g_ours, g_theirs = in_graph_us(ours), in_graph_us(theirs)
        rows.append({"x": key[0], "k": key[1], "rs": key[2], "stride": key[3],
                     "rel_err": ((got - want).norm() / want.norm()).item(),
                     "path": route.path, "variant": route.variant, "kernel": route.kernel or route.reason,
                     "torch_ms": t_theirs.p50_ms, "tracea_ms": t_ours.p50_ms,
                     "speedup": t_theirs.p50_ms / t_ours.p50_ms, "torch_graph_us": g_theirs,
                     "tracea_graph_us": g_ours})
        r = rows[-1]
        print(f"x {str(r['x']):<22} k {r['k']:<5} {str(r['rs']):<7} s{r['stride'][0]} torch {r['torch_ms']:.3f} ms "
              f"tracea {r['tracea_ms']:.3f} ms x{r['speedup']:.2f} | in a graph: torch {g_theirs:.1f} us tracea "
              f"{g_ours:.1f} us x{g_theirs / g_ours:.2f} | rel {r['rel_err']:.1e} {r['variant']} "
              f"{str(r['kernel'])[:60]}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--channels-last", action="store_true", help="model and input in channels_last memory")
    ap.add_argument("--layers", action="store_true", help="also each distinct convolution alone")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    torch.manual_seed(0)
    model = resnet50_convs().cuda().to(dtype).eval()
    x = torch.randn(args.batch, 3, 224, 224, device="cuda", dtype=dtype)
    if args.channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        want = model(x).float()
        torch_ms = time_forward(model, x, args.repeats)
        patched = tracea.ops.patch_conv2d(model)
        tracea.ops.clear_cache()
        paths: collections.Counter[str] = collections.Counter()
        hooks = [mod.register_forward_hook(lambda m, i, o: paths.update([str(tracea.ops.explain().path) + (
                     "" if tracea.ops.explain().path == "tracea" else f": {tracea.ops.explain().reason}")]))
                 for mod in model.modules() if isinstance(mod, tracea.ops.TraceaConv2d)]
        got = model(x).float()
        for h in hooks:  # not in the timed forwards
            h.remove()
        counts = dict(paths)
        tracea_ms = time_forward(model, x, args.repeats)
        tracea.ops.unpatch_conv2d(model)
        layers = layer_table(model, x, args.repeats) if args.layers else None
    rel = ((got - want).norm() / want.norm()).item()
    row = {"batch": args.batch, "dtype": args.dtype, "channels_last": args.channels_last, "convs": patched, "paths_first_forward": counts,
           "rel_err": rel, "torch_ms": torch_ms, "tracea_ms": tracea_ms, "speedup": torch_ms / tracea_ms,
           "device": torch.cuda.get_device_name()}
    print(json.dumps(row, indent=2))
    row["layers"] = layers
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2)
    return 0 if rel < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
