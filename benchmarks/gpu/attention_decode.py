"""Decode attention (issue 33) on a GPU: ``tracea.ops.attention`` on the user's CUDA tensors against SDPA's
fastest backend (FlexAttention for a window), and the K/V bytes a second against the device's copy bandwidth
measured in the same run.

For each row the kernel is first verified: the kernel object that the ``tracea.ops`` call prepared runs on
fresh random inputs and its O and lse are compared with the float64 reference (and the ops call's output
with the baseline's). Then three timings, each call between CUDA events on one stream with the L2 flushed
and the stream held before it (``runtime.event_timing``): the kernel as ``tracea bench`` times it, the
``tracea.ops`` call and the baseline. Ratios are baseline / Tracea (over 1: Tracea faster); a ratio from an
unstable side (p95 > 1.5x median) is not printed. K/V TB/s counts the keys some query keeps, once each (K
and V, 16-bit); "of copy" divides it by the copy bandwidth (bytes read + written a second by a device copy of
1 GiB, the same timing).

    python benchmarks/gpu/attention_decode.py [--repeats 30] [--rows decode|all]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import torch

import tracea
from tracea.emitters.baselines import attention as baseline
from tracea.emitters.cuda.runtime import _Device, event_timing
from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, Attention, lse_error

ops = tracea.ops
UNSTABLE = 1.5

# (label, Attention) — 1-16 queries, 1k-128k keys, MHA and GQA, d64/d128; then other head dims and a window
DECODE = [
    ("b8 h32/8 q1 k8192 d128", Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16")),
    ("b1 h32/8 q1 k131072 d128", Attention(1, 32, 1, 128, seq_k=131072, kv_heads=8, dtype="bf16")),
    ("b16 h32/8 q1 k1024 d128", Attention(16, 32, 1, 128, seq_k=1024, kv_heads=8, dtype="bf16")),
    ("b4 h32 q1 k16384 d128 (MHA)", Attention(4, 32, 1, 128, seq_k=16384, kv_heads=32, dtype="bf16")),
    ("b16 h16 q1 k4096 d64 (MHA)", Attention(16, 16, 1, 64, seq_k=4096, kv_heads=16, dtype="bf16")),
    ("b8 h32/8 q1 k65536 d64", Attention(8, 32, 1, 64, seq_k=65536, kv_heads=8, dtype="bf16")),
    ("b8 h32/8 q4 k8192 d128 causal", Attention(8, 32, 4, 128, seq_k=8192, kv_heads=8, dtype="bf16", causal=True)),
    ("b4 h32/8 q16 k32768 d128 causal", Attention(4, 32, 16, 128, seq_k=32768, kv_heads=8, dtype="bf16",
                                                   causal=True)),
    ("b2 h16 q8 k8192 d64 causal (MHA)", Attention(2, 16, 8, 64, seq_k=8192, kv_heads=16, dtype="fp16", causal=True)),
]
OTHERS = [
    ("b8 h32/8 q1 k8192 d96", Attention(8, 32, 1, 96, seq_k=8192, kv_heads=8, dtype="bf16")),
    ("b8 h32/8 q1 k8192 d80", Attention(8, 32, 1, 80, seq_k=8192, kv_heads=8, dtype="bf16")),
    ("b4 h16/4 q1 k8192 d256", Attention(4, 16, 1, 256, seq_k=8192, kv_heads=4, dtype="bf16")),
    ("b8 h32/8 q1 k8192 d64 window 256,0", Attention(8, 32, 1, 64, seq_k=8192, kv_heads=8, dtype="bf16",
                                                     window=(256, 0))),
]


def copy_bandwidth(dev: Any, repeats: int) -> tuple[float, Any]:
    """Bytes read + written a second by a 1 GiB device-to-device copy (TB/s), and its timing."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = event_timing(dev, lambda: dst.copy_(src), 5, repeats)
    return 2 * src.numel() / (t.p50_ms * 1e-3) / 1e12, t


def host(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous().cpu()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def kv_bytes(op: Attention) -> int:
    """K and V bytes of the keys some query keeps (each read once)."""
    rows = np.arange(op.seq_q)
    lo, hi = op._key_ranges(rows)
    keys = int(max(0, hi.max() - lo.min()))
    return 2 * op.batch * op.kv_heads * keys * op.head_dim * op.dtype.itemsize


def fmt(t: Any) -> str:
    return f"{t.p50_ms:.4f} / {t.p95_ms:.4f}"


def ratio(num: Any, den: Any) -> str:
    ok = all(x.p95_ms <= UNSTABLE * x.p50_ms for x in (num, den))
    return f"{num.p50_ms / den.p50_ms:.2f}x" if ok else "unstable"


def row(label: str, op: Attention, dev: Any, repeats: int, copy_tbs: float) -> str:
    g = torch.Generator(device="cuda").manual_seed(11)
    dt = torch.bfloat16 if op.dtype.value == "bf16" else torch.float16
    shapes = op.shapes()
    t = {n: torch.randn(*shapes[n], device="cuda", dtype=dt, generator=g) for n in ("q", "k", "v")}
    out = torch.empty(op.output_shape(), device="cuda", dtype=dt)
    kw = {"causal": op.causal, "window": op.window}

    def mine() -> Any:
        return ops.attention(t["q"], t["k"], t["v"], out=out, **kw)

    ops.clear_cache()
    mine()
    route = ops.explain()
    if route.path != "tracea":
        return f"| {label} | {route} | not timed |"
    mine()
    kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel
    rng = np.random.default_rng()
    fresh = op.random_inputs(rng)
    o, lse = kernel.forward(fresh)
    ref, ref_lse = op.reference_with_lse(fresh)
    err, lerr = relative_error(to_float64(o, op.dtype), ref), lse_error(lse, ref_lse)
    verified = err <= tolerance(op) and lerr <= LSE_TOLERANCE
    base = baseline.device(op, t, torch)
    base_name, base_call = base[0], base[1]
    want = base_call().float()
    torch.cuda.synchronize()
    err_vs = float((out.float() - want).abs().max() / want.abs().max())
    if not verified:
        return f"| {label} | {kernel.artifact.name} | NOT VERIFIED: rel. error {err:.2g}, lse {lerr:.2g} |"
    bench = kernel.time(fresh, warmup=5, repeats=repeats)
    ops_t = event_timing(dev, mine, 5, repeats)
    base_t = event_timing(dev, base_call, 5, repeats)
    split = kernel.rendered.metadata.get("key_slices", {}).get("splits", "-")
    tbs = kv_bytes(op) / (bench.p50_ms * 1e-3) / 1e12
    return (f"| {label} | {kernel.artifact.name} | {split} | {fmt(bench)} | {fmt(ops_t)} | {base_name.split(' (')[0]} "
            f"{fmt(base_t)} | {ratio(base_t, ops_t)} | {ratio(base_t, bench)} | {tbs:.2f} | {tbs / copy_tbs:.0%} | "
            f"{err:.1e} / {lerr:.1e} / {err_vs:.1e} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--rows", choices=("decode", "all"), default="all")
    args = ap.parse_args(argv)
    dev = _Device.get()
    stream = torch.cuda.ExternalStream(int(dev.stream.handle))
    lines = []
    with torch.inference_mode(), torch.cuda.stream(stream):
        copy_tbs, copy_t = copy_bandwidth(dev, args.repeats)
        for label, op in DECODE + (OTHERS if args.rows == "all" else []):
            try:
                lines.append(row(label, op, dev, args.repeats, copy_tbs))
            except Exception as exc:  # noqa: BLE001 - one row's failure is printed, the others still run
                lines.append(f"| {label} | FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:160]} |")
            print(lines[-1], flush=True)
    print(f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; ms, median / p95 of {args.repeats}; "
          f"device copy {copy_tbs:.2f} TB/s (1 GiB, {fmt(copy_t)} ms)\n")
    print("| row | kernel | splits | kernel as `tracea bench` times it | `tracea.ops` call | baseline | "
          "baseline / ops | baseline / kernel | K/V TB/s | of copy | rel. err O / lse abs / vs baseline |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
