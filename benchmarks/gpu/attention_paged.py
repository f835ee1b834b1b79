"""Paged and ragged decode attention (issue 33) on a GPU, through ``tracea.ops.attention`` on the user's CUDA
tensors: the same keys run contiguous (Tracea's own decode), from a paged cache of 16- and 64-key pages dealt
in a random order, and by SDPA's fastest backend over the padded batch (the pages gathered before timing, the
lengths as a boolean mask); then the host time of one call.

Each call is verified first: its output on fresh random tensors against the float64 reference of the same
tensors (gathered through the pages at each entry's length). A paged twin takes the lengths its contiguous
row takes (none: every entry full). Timings: each call between CUDA events on one
stream, the L2 flushed and the stream held before it (``runtime.event_timing``), median / p95. "paged /
contiguous" is Tracea's contiguous time over its paged time (over 1: paging costs nothing); a ratio from an
unstable side (p95 > 1.5x median) is not printed. Host time: the wall time of 200 calls queued behind a long
device sleep (so nothing waits for the GPU), a call; ``check_tables=True`` also waits for its check's one
device read, so its figure is the wall time of a call on an idle GPU.

    python benchmarks/gpu/attention_paged.py [--repeats 30] [--split-sweep] [--rows N]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

import numpy as np
import torch

import tracea
from tracea.emitters.baselines import attention as baseline
from tracea.emitters.cuda.runtime import _Device, event_timing
from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import Attention

ops = tracea.ops
UNSTABLE = 1.5
RAGGED = tuple(int(x) for x in np.random.default_rng(33).integers(1024, 16385, 16))  # 16 entries, 1k-16k keys

# (label, the contiguous op; its paged twins take the same lengths)
ROWS = [
    ("b8 h32/8 q1 k8192 d128", Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16")),
    ("b1 h32/8 q1 k131072 d128", Attention(1, 32, 1, 128, seq_k=131072, kv_heads=8, dtype="bf16")),
    ("b16 h16 q1 k4096 d64 (MHA)", Attention(16, 16, 1, 64, seq_k=4096, kv_heads=16, dtype="bf16")),
    ("b8 h32/8 q4 k8192 d128 causal", Attention(8, 32, 4, 128, seq_k=8192, kv_heads=8, dtype="bf16", causal=True)),
    (f"b16 h32/8 q1 d128 ragged k1k-16k (mean {int(np.mean(RAGGED))})",
     Attention(16, 32, 1, 128, seq_k=max(RAGGED), kv_heads=8, dtype="bf16", seq_lens=RAGGED)),
]
PAGES = (16, 64)


def tensors(op: Attention, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Random q, k, v (and the table and lengths) of ``op`` on the GPU, laid out as op.random_inputs draws
    them (the table's pages in a random order)."""
    host = op.random_inputs(np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=gen))))
    out = {}
    for n, x in host.items():
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if x.dtype == np.uint16 else torch.from_numpy(x)
        out[n] = t.cuda()
    return out


def to_host(t: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {n: (x.cpu().view(torch.int16).numpy().view(np.uint16) if x.dtype == torch.bfloat16 else x.cpu().numpy())
            for n, x in t.items()}


def call(op: Attention, t: dict[str, torch.Tensor], out: torch.Tensor, check: bool = False) -> Any:
    extra = {}
    if "block_table" in t:
        extra["block_table"] = t["block_table"]
    if "seq_lens" in t:
        extra["seq_lens"] = t["seq_lens"]
    return lambda: ops.attention(t["q"], t["k"], t["v"], causal=op.causal, window=op.window, out=out,
                                 check_tables=check, **extra)


def fmt(t: Any) -> str:
    return f"{t.p50_ms:.4f} / {t.p95_ms:.4f}"


def ratio(num: Any, den: Any) -> str:
    ok = all(x.p95_ms <= UNSTABLE * x.p50_ms for x in (num, den))
    return f"{num.p50_ms / den.p50_ms:.2f}x" if ok else "unstable"


def host_us(fn: Any, n: int = 200) -> float:
    """Wall time of one call, ``n`` calls queued behind a device sleep (the GPU never idles the host)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # about a second at H200 clocks: longer than n calls take to queue
    s = time.perf_counter()
    for _ in range(n):
        fn()
    wall = time.perf_counter() - s
    torch.cuda.synchronize()
    return wall / n * 1e6


def wall_us(fn: Any, n: int = 100) -> float:
    """Wall time of one call on an idle GPU, each call waited for (a checked call reads its check back)."""
    fn()
    torch.cuda.synchronize()
    s = time.perf_counter()
    for _ in range(n):
        fn()
        torch.cuda.synchronize()
    return (time.perf_counter() - s) / n * 1e6


def verified(op: Attention, t: dict[str, torch.Tensor], fn: Any, out: torch.Tensor) -> float:
    """The call's relative error against the float64 reference of its own tensors."""
    ops.clear_cache()
    fn()
    route = ops.explain()
    if route.path != "tracea":
        raise RuntimeError(f"not a Tracea kernel: {route}")
    torch.cuda.synchronize()
    got = to_float64(to_host({"o": out})["o"], op.dtype)
    return relative_error(got, op.reference(to_host(t)))


def row(label: str, op: Attention, dev: Any, repeats: int, gen: torch.Generator) -> list[str]:
    dt = torch.bfloat16 if op.dtype.value == "bf16" else torch.float16
    out = torch.empty(op.output_shape(), device="cuda", dtype=dt)
    lines = []
    t = tensors(op, gen)
    contiguous = call(op, t, out)
    err = verified(op, t, contiguous, out)
    if not err <= tolerance(op):
        return [f"| {label} | contiguous | NOT VERIFIED: rel. error {err:.2g} |"]
    cont_t = event_timing(dev, contiguous, 5, repeats)
    sdpa_name, sdpa = baseline.device(op, t, torch)[:2]
    sdpa_t = event_timing(dev, sdpa, 5, repeats)
    kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel.artifact.name
    lines.append(f"| {label} | contiguous{' + seq_lens' if op.seq_lens else ''} | {kernel} | {fmt(cont_t)} | - | "
                 f"{ratio(sdpa_t, cont_t)} | {err:.1e} | {host_us(contiguous):.1f} | - |")
    for page in PAGES:
        paged = Attention(op.batch, op.heads, op.seq_q, op.head_dim, seq_k=op.seq_k, kv_heads=op.kv_heads,
                          dtype=op.dtype, causal=op.causal, window=op.window, seq_lens=op.seq_lens, page_size=page)
        tp = tensors(paged, gen)
        fn = call(paged, tp, out)
        err = verified(paged, tp, fn, out)
        if not err <= tolerance(paged):
            lines.append(f"| {label} | paged {page} | NOT VERIFIED: rel. error {err:.2g} |")
            continue
        pt = event_timing(dev, fn, 5, repeats)
        kernel = next(iter(tracea.ops._prepared.PREPARED.values())).kernel.artifact.name
        lines.append(f"| {label} | paged {page}, shuffled | {kernel} | {fmt(pt)} | {ratio(cont_t, pt)} | "
                     f"{ratio(sdpa_t, pt)} | {err:.1e} | {host_us(fn):.1f} | "
                     f"{wall_us(call(paged, tp, out, check=True)):.1f} |")
    lines.append(f"| {label} | {sdpa_name.split(' (')[0]}, padded batch | - | {fmt(sdpa_t)} | - | 1.00x | - | "
                 f"{host_us(sdpa):.1f} | - |")
    return lines


def split_sweep(dev: Any, repeats: int) -> list[str]:
    """The kernel alone (as ``tracea bench`` times it) at fixed key-slice counts, for the split rule of ops with
    lengths given at run time: the ragged row, and the first row with every length full, both paged by 16."""
    from tracea.emitters import cuda
    from tracea.emitters.cuda.attention_decode import hero_schedule

    cases = [("ragged k1k-16k, paged 16", ROWS[-1][1]),
             ("b8 k8192 lengths all 8192, paged 16", Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16",
                                                                seq_lens=(8192,) * 8))]
    lines = []
    for label, op in cases:
        op = dataclasses.replace(op, page_size=16, pages=None)
        inputs = op.random_inputs(np.random.default_rng(5))
        ref = op.reference(inputs)
        cells = []
        for n in (0, 1, 2, 3, 4, 6, 8, 12):
            sched = dataclasses.replace(hero_schedule(op, None), split=n)
            k = cuda.build(op, "cuda-mma-sync.attention", sched, None)
            err = relative_error(to_float64(k(inputs), op.dtype), ref)
            if not err <= tolerance(op):
                cells.append(f"{n}: NOT VERIFIED {err:.2g}")
                continue
            t = k.time(inputs, warmup=5, repeats=repeats)
            got = k.rendered.metadata["key_slices"]["splits"]
            cells.append(f"{n or 'auto'}{'' if n else f'={got}'}: {t.p50_ms:.4f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def run_rows(rows: list[tuple[str, Attention]], row_fn: Any, repeats: int) -> list[str]:
    """Each (label, op) of ``rows`` through ``row_fn(label, op, dev, repeats, gen)`` on the kernels' stream, its
    lines printed as they come; a row that raises is one FAILED line and the others still run."""
    dev = _Device.get()
    stream = torch.cuda.ExternalStream(int(dev.stream.handle))
    gen = torch.Generator().manual_seed(7)
    lines = []
    with torch.inference_mode(), torch.cuda.stream(stream):
        for label, op in rows:
            try:
                new = row_fn(label, op, dev, repeats, gen)
            except Exception as exc:  # noqa: BLE001 - one row's failure is printed, the others still run
                new = [f"| {label} | FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:160]} |"]
            lines += new
            print("\n".join(new), flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--split-sweep", action="store_true", help="also time fixed key-slice counts (the split rule)")
    ap.add_argument("--rows", type=int, default=len(ROWS), help="the first N rows only")
    args = ap.parse_args(argv)
    lines = run_rows(ROWS[:args.rows], row, args.repeats)
    dev = _Device.get()
    print(f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; ms, median / p95 of {args.repeats}; "
          f"ragged lengths {RAGGED}\n")
    print("| row | K/V | kernel | `tracea.ops` call, ms | paged / contiguous | SDPA / this | rel. err | host us a call "
          "| wall us a call, check_tables=True |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    if args.split_sweep:
        print("\nKey slices (schedule split; ms, kernel median):")
        with torch.inference_mode():
            print("\n".join(split_sweep(dev, args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
