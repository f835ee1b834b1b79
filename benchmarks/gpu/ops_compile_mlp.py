"""A Llama-style MLP block, down(silu(x @ W_gate) * (x @ W_up)), run eager, under
``torch.compile(backend="inductor")`` and under ``torch.compile(backend="tracea")``: each output verified
against the float64 reference first, then the forward times printed side by side (CUDA events, median of the
repeats after warm-up; compiling and building the kernels happen in the warm-up and are not timed), with
the backend's report (which nodes became Tracea ops, what compiled the rest) and how many calls ran a Tracea
kernel or fell back.

    python benchmarks/gpu/ops_compile_mlp.py [--tokens 2048] [--dim 4096] [--hidden 11008] [--dtype bf16]
        [--repeats 20] [--cudagraphs] [--json FILE]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

import tracea


def mlp(x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, wd: torch.Tensor) -> torch.Tensor:
    return (F.silu(x @ wg) * (x @ wu)) @ wd


def time_forward(fn, args: list[torch.Tensor], repeats: int) -> float:
    """Median ms of a forward, timed as every GPU figure of the project is (baselines.time_torch: CUDA events,
    L2 flushed and the stream held before each start)."""
    from tracea.emitters.device_baselines import time_torch

    return time_torch(lambda: fn(*args), 3, repeats).p50_ms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=11008)
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="bf16")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cudagraphs", action="store_true", help="Inductor's CUDA graph trees for both compiles")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    tracea.ops.register_compile_backend()
    g = torch.Generator().manual_seed(0)
    t, d, h = args.tokens, args.dim, args.hidden
    ref = [torch.randn(s, generator=g, dtype=torch.float64) / (s[0] ** 0.5 if i else 1)
           for i, s in enumerate(((t, d), (d, h), (d, h), (h, d)))]
    want = mlp(*[r.cuda() for r in ref])
    inputs = [r.to("cuda", dtype) for r in ref]
    row: dict = {"tokens": t, "dim": d, "hidden": h, "dtype": args.dtype, "cudagraphs": args.cudagraphs,
                 "device": torch.cuda.get_device_name()}
    ok = True
    with torch.inference_mode(), torch._inductor.config.patch({"triton.cudagraphs": args.cudagraphs}):
        for name, backend in (("eager", None), ("inductor", "inductor"), ("tracea", "tracea")):
            torch._dynamo.reset()
            tracea.ops.clear_cache()
            fn = mlp if backend is None else torch.compile(mlp, backend=backend)
            for _ in range(3):
                got = fn(*inputs)
            rel = ((got.double() - want).norm() / want.norm()).item()
            ok = ok and rel < 2e-2
            row[f"{name}_rel_err"] = rel
            row[f"{name}_ms"] = time_forward(fn, inputs, args.repeats)
            if name == "tracea":
                row["tracea_report"] = tracea.ops.last_report()
                row["tracea_calls"] = tracea.ops.stats()
    row["speedup_vs_eager"] = row["eager_ms"] / row["tracea_ms"]
    row["speedup_vs_inductor"] = row["inductor_ms"] / row["tracea_ms"]
    print(json.dumps(row, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
