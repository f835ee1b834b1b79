"""Packed variable-length prefill (issue 33) on a GPU, through ``tracea.ops.attention(q, k, v, cu_seqlens=...)``
on the user's CUDA tensors (FlashAttention's varlen layout: q (tokens, heads, head_dim), k and v (tokens,
kv_heads, head_dim)), against the same entries run as one padded batch by SDPA's fastest backend (cuDNN, flash
or efficient, each tried): padded to the longest entry before timing, the output left padded (the timed call
is SDPA alone). Causal entries need no mask there (an entry's rows never reach its padding), nor do entries
of equal length; mixed lengths without a causal mask take their lengths as SDPA's boolean mask. Where this
torch has it, ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention's varlen forward) runs the packed
tensors as they are, beside.

Every call is verified first, Tracea's and each baseline's: its output on fresh random tensors against a float32
reference of the same tensors (SDPA entry by entry on float32 copies). Timings: each call between CUDA events
on one stream, the L2 flushed and the stream held before it (``runtime.event_timing``), median / p95; a ratio
from an unstable side (p95 > 1.5x median) is not printed. "padded / Tracea" over 1: Tracea is faster. Host
time: ``check_tables=False`` (the offsets' check reads them back, a device sync: its wall time is printed apart).

    python benchmarks/gpu/attention_packed.py [--repeats 30] [--rows N] [--sweep ROW]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import torch
from attention_paged import UNSTABLE, fmt, host_us, ratio, run_rows, tensors, wall_us

import tracea
from tracea.emitters.baselines import attention as baseline
from tracea.emitters.cuda.runtime import event_timing
from tracea.kernels import relative_error, tolerance
from tracea.kernels.ops.attention import Attention

ops = tracea.ops
RNG = np.random.default_rng(33)
MIXED = tuple(int(x) for x in RNG.integers(512, 4097, 8))  # 8 entries of 512-4096 tokens
SHORT = tuple(int(x) for x in RNG.integers(64, 1025, 32))  # 32 entries of 64-1024 tokens: a serving prefill batch


def packed(lens: tuple[int, ...], heads: int, kv: int, d: int, causal: bool) -> Attention:
    return Attention(len(lens), heads, max(lens), d, seq_k=max(lens), kv_heads=kv, dtype="bf16", causal=causal,
                     seq_lens=lens, packed=True)


ROWS = [
    ("h32/8 d128, 4 x 4096 (equal)", packed((4096,) * 4, 32, 8, 128, False)),
    ("h32/8 d128, 4 x 4096 (equal), causal", packed((4096,) * 4, 32, 8, 128, True)),
    (f"h32/8 d128, 8 x 512-4096 (total {sum(MIXED)}), causal", packed(MIXED, 32, 8, 128, True)),
    (f"h32/8 d128, 8 x 512-4096 (total {sum(MIXED)})", packed(MIXED, 32, 8, 128, False)),
    (f"h16 d64, 32 x 64-1024 (total {sum(SHORT)}), causal", packed(SHORT, 16, 16, 64, True)),
    (f"h32/8 d80, 8 x 512-4096 (total {sum(MIXED)}), causal", packed(MIXED, 32, 8, 80, True)),
]


def reference(op: Attention, t: dict[str, torch.Tensor]) -> torch.Tensor:
    """O in float32: SDPA entry by entry over float32 copies (its math or efficient kernel)."""
    from tracea.ops._functions.attention import packed_fallback

    return packed_fallback(t["q"].float(), t["k"].float(), t["v"].float(), op.scale, op.causal, op.window,
                           t["cu_seqlens"])


def error(op: Attention, got: torch.Tensor, ref: torch.Tensor) -> float:
    return relative_error(got.double().cpu().numpy(), ref.double().cpu().numpy())


def padded(op: Attention, t: dict[str, torch.Tensor]) -> tuple[str, Any, Any]:
    """(name, timed call, checked call): ``tracea bench``'s packed baseline (``baselines.attention``: the entries
    padded to one batch before timing, a mask only where a row could reach the padding), timed as SDPA alone on
    the padded batch (its output left padded), checked with the entries' rows gathered back."""
    _, gathered, ((name, alone),) = baseline.serving(op, t, torch)
    return name, alone, gathered


def varlen(op: Attention, t: dict[str, torch.Tensor]) -> tuple[str, Any, Any] | None:
    """FlashAttention's varlen forward as torch ships it, on the packed tensors (K/V heads repeated for GQA
    before timing where this torch's ``varlen_attn`` has no ``enable_gqa``)."""
    import inspect

    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    cu, n, k, v = t["cu_seqlens"], op.seq_q, t["k"], t["v"]
    kw: dict[str, Any] = {"scale": op.scale}
    params = inspect.signature(varlen_attn).parameters
    if "window_size" in params:
        kw["window_size"] = (-1, 0) if op.causal else (-1, -1)
    elif "is_causal" in params:
        kw["is_causal"] = op.causal
    name = "varlen_attn"
    if op.kv_heads != op.heads:
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            g = op.heads // op.kv_heads
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            name += " (K/V heads repeated)"
    def call() -> Any:
        return varlen_attn(t["q"], k, v, cu, cu, n, n, **kw)

    return name, call, call


def row(label: str, op: Attention, dev: Any, repeats: int, gen: torch.Generator) -> list[str]:
    t = tensors(op, gen)
    out = torch.empty(op.output_shape(), device="cuda", dtype=torch.bfloat16)
    ref = reference(op, t)

    def fn(check: bool = False) -> Any:
        return lambda: ops.attention(t["q"], t["k"], t["v"], causal=op.causal, window=op.window, out=out,
                                     cu_seqlens=t["cu_seqlens"], max_seqlen=op.seq_q, check_tables=check)

    ops.clear_cache()
    fn()()
    route = ops.explain()
    if route.path != "tracea":
        return [f"| {label} | FALLBACK: {route} |"]
    err = error(op, out, ref)
    if not err <= tolerance(op):
        return [f"| {label} | NOT VERIFIED: rel. error {err:.2g} |"]
    kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel.artifact.name
    mine = event_timing(dev, fn(), 5, repeats)
    tflops = op.flops / mine.p50_ms / 1e9
    cells = [f"| {label} | {kernel} | {fmt(mine)} | {tflops:.0f} | {err:.1e}"]
    for base in (padded(op, t), varlen(op, t)):
        if base is None:
            cells.append("varlen_attn: not in this torch | -")
            continue
        name, call, checked = base
        try:
            berr = error(op, checked(), ref)
        except Exception as exc:  # noqa: BLE001 - a baseline this torch cannot run is said, not fatal
            cells.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:80]} | -")
            continue
        if not berr <= tolerance(op):
            cells.append(f"{name}: NOT VERIFIED ({berr:.2g}) | -")
            continue
        bt = event_timing(dev, call, 5, repeats)
        cells.append(f"{name} {fmt(bt)} | {ratio(bt, mine)}")
    cells.append(f"{host_us(fn()):.1f} | {wall_us(fn(True)):.1f} |")
    return [" | ".join(cells)]


def sweep(index: int, repeats: int) -> list[str]:
    """The kernel alone (as ``tracea bench`` times it) for row ``index`` over the search space's schedules that
    take packed entries, and the plain kernel's hero on the padded batch where the entries are of one length
    (what the packed form costs over it); each verified first against the float64 reference."""
    import dataclasses

    from tracea.emitters.cuda.hopper.attention_kernel import build
    from tracea.emitters.cuda.hopper.attention_schedule import hero_schedule, search_space
    from tracea.kernels.dtypes import to_float64

    label, op = ROWS[index]
    inputs = op.random_inputs(np.random.default_rng(5))
    ref = op.reference(inputs)
    lines = [f"sweep of {label}:"]
    if len(set(op.key_lens)) == 1:
        plain = dataclasses.replace(op, seq_lens=None, packed=False)
        pin = plain.random_inputs(np.random.default_rng(5))
        k = build(plain)
        err = relative_error(to_float64(k(pin), plain.dtype), plain.reference(pin))
        t = k.time(pin, warmup=5, repeats=repeats)
        lines.append(f"  plain hero {k.schedule.name} on the padded batch: {fmt(t)} (rel. err {err:.1e})")
    hero = hero_schedule(op)
    for s in [hero] + [x for x in search_space(op) if not x.persistent and x != hero]:
        try:
            k = build(op, s)
            err = relative_error(to_float64(k(inputs), op.dtype), ref)
            if not err <= tolerance(op):
                lines.append(f"  {s.name}: NOT VERIFIED {err:.2g}")
                continue
            t = k.time(inputs, warmup=5, repeats=repeats)
            lines.append(f"  {s.name}{' (hero)' if s == hero else ''}: {fmt(t)}")
        except Exception as exc:  # noqa: BLE001 - one schedule's failure is printed, the others still run
            lines.append(f"  {s.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--rows", type=int, default=len(ROWS), help="the first N rows only")
    ap.add_argument("--sweep", type=int, default=None, metavar="ROW", help="only the kernel over the schedules of row ROW")
    args = ap.parse_args(argv)
    if args.sweep is not None:
        print("\n".join(sweep(args.sweep, args.repeats)))
        return 0
    lines = run_rows(ROWS[:args.rows], row, args.repeats)
    print(f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; bf16; ms, median / p95 of "
          f"{args.repeats}; unstable: p95 > {UNSTABLE}x median; mixed lengths {MIXED}; short {SHORT}\n")
    print("| row | kernel | `tracea.ops` call, ms | TFLOP/s | rel. err | padded SDPA, ms | padded / Tracea | "
          "varlen_attn, ms | varlen / Tracea | host us a call | wall us, check_tables=True |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
