"""``tracea.ops`` on CUDA tensors against ``tracea bench``'s timing of the same kernel and against PyTorch's op,
in one process and under one method: each call between two CUDA events on one stream, the L2 flushed and the
stream held busy before it (``runtime.event_timing``, what ``tracea bench`` does), so the figure is the GPU
time of the call as a user makes it, with its prepared launch, on the user's tensors.

For each shape: the op runs once through ``tracea.ops`` and is checked against PyTorch's result; the kernel
object that call prepared is then timed as ``tracea bench`` times it (its own buffers, ``kernel.time``), the
``tracea.ops`` call is timed on the torch tensors (``out=`` given, on the same stream), and so is PyTorch's op.
The table gives the medians and p95s (ms) and two ratios: ops/bench (the launch path's cost on the GPU; 1.00
is none) and vendor/ops (over 1: Tracea faster). A ratio from an unstable side (p95 > 1.5x median) is not
printed.

    python benchmarks/gpu/ops_vs_bench.py [--repeats 30] [--match attention]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import tracea
from tracea.emitters.cuda.runtime import _Device, event_timing

ops = tracea.ops
UNSTABLE = 1.5


def host(t: torch.Tensor) -> np.ndarray:
    """A tensor as the kernel object's host arrays hold it (bf16 as its uint16 bits)."""
    t = t.detach().contiguous().cpu()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def cases(dev: str) -> list[tuple[str, Any, Any, dict[str, torch.Tensor], torch.Tensor]]:
    g = torch.Generator(device=dev).manual_seed(7)

    def r(*shape: int, dtype: torch.dtype = torch.float16) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dtype, generator=g)

    bf = torch.bfloat16
    a4, b4 = r(4096, 4096, dtype=bf), r(4096, 4096, dtype=bf)
    a1, b1, bias1 = r(1000, 1001), r(1001, 999), r(999)
    x = r(32, 256, 14, 14).contiguous(memory_format=torch.channels_last)
    w = (r(256, 256, 3, 3) * 0.05).contiguous(memory_format=torch.channels_last)
    s = r(4096, 4096)
    # 1x1 convs over 440 channels (880-byte rows): conv_heroes.off_line_1x1's pairs of 128 x 256 and 128 x 128 tiles
    xo = [r(64, 440, hw, hw).contiguous(memory_format=torch.channels_last) for hw in (28, 14)]
    # 3x3 convs of filters off 64 (conv_heroes.fitted_width: 192 x 96 tiles on three consumers, 64 x 96 on one)
    x96 = [r(n, 96, hw, hw).contiguous(memory_format=torch.channels_last) for n, hw in ((32, 56), (8, 28))]
    w96 = (r(96, 96, 3, 3) * 0.05).contiguous(memory_format=torch.channels_last)
    wo = (r(440, 440, 1, 1) * 0.05).contiguous(memory_format=torch.channels_last)
    q, k, v = r(2, 16, 2048, 128, dtype=bf), r(2, 16, 2048, 128, dtype=bf), r(2, 16, 2048, 128, dtype=bf)
    q6, k6, v6 = r(16, 32, 512, 64, dtype=bf), r(16, 32, 512, 64, dtype=bf), r(16, 32, 512, 64, dtype=bf)
    return [
        ("gemm bf16 4096x4096x4096", lambda out: ops.gemm(a4, b4, out=out), lambda: torch.matmul(a4, b4),
         {"a": a4, "b": b4}, torch.empty(4096, 4096, device=dev, dtype=bf)),
        ("gemm fp16 1000x999x1001 + bias,gelu",
         lambda out: ops.gemm(a1, b1, bias=bias1, epilogue="bias,gelu", out=out),
         lambda: F.gelu(torch.addmm(bias1, a1, b1)), {"a": a1, "b": b1, "bias": bias1},
         torch.empty(1000, 999, device=dev, dtype=torch.float16)),
        ("conv2d fp16 32x256x14x14, 256 3x3, pad 1, channels_last",
         lambda out: ops.conv2d(x, w, padding=1, out=out), lambda: F.conv2d(x, w, padding=1),
         {"x": x.permute(0, 2, 3, 1), "weight": w.permute(0, 2, 3, 1)},
         torch.empty(32, 256, 14, 14, device=dev, dtype=torch.float16).contiguous(memory_format=torch.channels_last)),
        *[(f"conv2d fp16 64x440x{x_.shape[2]}x{x_.shape[2]}, 440 1x1, channels_last",
           lambda out, x_=x_: ops.conv2d(x_, wo, out=out), lambda x_=x_: F.conv2d(x_, wo),
           {"x": x_.permute(0, 2, 3, 1), "weight": wo.permute(0, 2, 3, 1)},
           torch.empty(64, 440, x_.shape[2], x_.shape[2], device=dev, dtype=torch.float16)
           .contiguous(memory_format=torch.channels_last)) for x_ in xo],
        *[(f"conv2d fp16 {x_.shape[0]}x96x{x_.shape[2]}x{x_.shape[2]}, 96 3x3, pad 1, channels_last",
           lambda out, x_=x_: ops.conv2d(x_, w96, padding=1, out=out), lambda x_=x_: F.conv2d(x_, w96, padding=1),
           {"x": x_.permute(0, 2, 3, 1), "weight": w96.permute(0, 2, 3, 1)},
           torch.empty(x_.shape[0], 96, x_.shape[2], x_.shape[2], device=dev, dtype=torch.float16)
           .contiguous(memory_format=torch.channels_last)) for x_ in x96],
        ("softmax fp16 4096x4096", lambda out: ops.softmax(s, out=out), lambda: torch.softmax(s, -1), {"x": s},
         torch.empty(4096, 4096, device=dev, dtype=torch.float16)),
        ("attention bf16 b2 h16 s2048 d128 causal", lambda out: ops.attention(q, k, v, causal=True, out=out),
         lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), {"q": q, "k": k, "v": v},
         torch.empty(2, 16, 2048, 128, device=dev, dtype=bf)),
        ("attention bf16 b16 h32 s512 d64", lambda out: ops.attention(q6, k6, v6, out=out),
         lambda: F.scaled_dot_product_attention(q6, k6, v6), {"q": q6, "k": k6, "v": v6},
         torch.empty(16, 32, 512, 64, device=dev, dtype=bf)),
    ]


def fmt(t: Any) -> str:
    return f"{t.p50_ms:.4f} / {t.p95_ms:.4f}"


def ratio(num: Any, den: Any) -> str:
    ok = all(x.p95_ms <= UNSTABLE * x.p50_ms for x in (num, den))
    return f"{num.p50_ms / den.p50_ms:.2f}x" if ok else "unstable"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--match", default="", help="only the shapes whose label has this")
    args = ap.parse_args(argv)
    dev = _Device.get()
    stream = torch.cuda.ExternalStream(int(dev.stream.handle))  # Tracea's timing stream, torch's current one
    rows = []
    with torch.inference_mode(), torch.cuda.stream(stream):
        for label, mine, theirs, inputs, out in cases("cuda"):
            if args.match not in label:
                continue
            ops.clear_cache()
            mine(out)
            route = ops.explain()
            want = theirs().float()
            err = float((out.float() - want).abs().max() / want.abs().max())
            if route.path != "tracea" or not err < 2e-2:
                print(f"{label}: {route} (relative error {err:.2g} against PyTorch): not timed")
                continue
            mine(out)  # the prepared call
            kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel
            bench = kernel.time({n: host(t) for n, t in inputs.items()}, warmup=5, repeats=args.repeats)
            mine_t = event_timing(dev, lambda mine=mine, out=out: mine(out), 5, args.repeats)
            theirs_t = event_timing(dev, theirs, 5, args.repeats)
            torch.cuda.synchronize()
            err2 = float((out.float() - want).abs().max() / want.abs().max())  # still right after the timed calls
            rows.append(f"| {label} | {route.variant} | {fmt(bench)} | {fmt(mine_t)} | {fmt(theirs_t)} | "
                        f"{ratio(mine_t, bench)} | {ratio(theirs_t, mine_t)} | {max(err, err2):.1e} |")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; ms, median / p95 of {args.repeats}\n")
    print("| op | variant | kernel as `tracea bench` times it | `tracea.ops` call | PyTorch | ops / bench | "
          "PyTorch / ops | rel. err vs PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
