"""Where the host time of a repeated ``tracea.ops`` call goes, part by part, beside the framework's op and
the GPU time of the same calls: which part of ``bench_ops_host.py --cuda``'s figure is the call's own Python,
which the driver's launch, and whether the GPU (not the host) sets the pace.

For each case (the shapes of ``bench_ops_host.py``), after a check of the output against PyTorch's:
- wall per call over ``--calls`` calls (the host's time; the GPU drained before and after, not counted);
- the same calls between two CUDA events (if the GPU runs slower than the host queues, this is the larger);
- each part of the prepared call timed alone over ``--calls`` repeats: the key, the lookup, the result's
  allocation, the stream query, the pointers, ``launch_ptrs`` (the recorded driver calls replayed), the
  prepared call in Python and in C (``_native_call.Launcher``, which a repeated call runs where it is built).

    python benchmarks/gpu/ops_call_parts.py [--calls 2000]

Needs a GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import tracea
from tracea.ops import _prepared as prep

ops = tracea.ops


def wall_us(fn: Callable[[], Any], calls: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = time.perf_counter() - t
    torch.cuda.synchronize()
    return dt / calls * 1e6


def gpu_us(fn: Callable[[], Any], calls: int) -> float:
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / calls * 1e3


def best_of(fn: Callable[[], Any], calls: int, rounds: int = 5) -> float:
    return statistics.median(wall_us(fn, calls) for _ in range(rounds))


def parts(label: str, mine: Callable[[], Any], theirs: Callable[[], Any], arrays: tuple[Any, ...],
          calls: int) -> None:
    got, want = mine().float(), theirs().float()
    err = float((got - want).abs().max() / want.abs().max())
    if not err < 2e-2:
        sys.exit(f"{label}: differs from PyTorch: {err:.2g}")
    for _ in range(3):
        mine(), theirs()
    route = ops.explain()
    # the Prepared of this case: the newest entry (the case just ran, and each case has one signature)
    p = list(prep.PREPARED.values())[-1]
    kernel = p.kernel
    ptrs = tuple(0 if i < 0 else arrays[i].data_ptr() for i in p.slots)
    out = p.alloc(arrays)
    ptrs = tuple(out.data_ptr() if i < 0 else q for i, q in zip(p.slots, ptrs, strict=True))
    stream = p.stream()
    key0 = prep.array_key(arrays[0])
    print(f"\n--- {label}: {route.variant}, kernel {type(kernel).__name__} "
          f"{getattr(getattr(kernel, 'rendered', None), 'name', '')}")
    rows = [
        ("tracea.ops call, wall", best_of(mine, calls)),
        ("framework's op, wall", best_of(theirs, calls)),
        ("tracea.ops calls, GPU (events)", gpu_us(mine, calls)),
        ("framework's op, GPU (events)", gpu_us(theirs, calls)),
        ("  array_key of one argument", best_of(lambda: prep.array_key(arrays[0]), calls)),
        ("  dict lookup of a key", best_of(lambda: prep.PREPARED.get(key0), calls)),
        ("  allocation of the result", best_of(lambda: p.alloc(arrays), calls)),
        ("  stream query", best_of(p.stream, calls)),
        ("  pointers", best_of(lambda: [0 if i < 0 else arrays[i].data_ptr() for i in p.slots], calls)),
        ("  launch_ptrs (replay)", best_of(lambda: kernel.launch_ptrs(ptrs, stream), calls)),
        ("  Prepared.__call__ (the call in Python)", best_of(lambda: p(arrays, None), calls)),
        ("  torch.empty_like of the input", best_of(lambda: torch.empty_like(arrays[0]), calls)),
    ]
    if p.fast is not None and type(p.fast(arrays)) is tuple:  # no tape: a kernel with scratch of its own
        rows.append(("  the compiled call up to the launch (no tape: the kernel has scratch; launch_ptrs then "
                     "launches)", best_of(lambda: p.fast(arrays), calls)))
    elif p.fast is not None:  # the compiled call (tracea_cli/ops/_native_call.py): what a repeated call runs
        rows.append(("  the compiled call (Launcher, C)", best_of(lambda: p.fast(arrays), calls)))
    else:
        rows.append(("  the compiled call: not built here (no C compiler or Python.h?)", 0.0))
    tape = next(iter(kernel._tapes.values())) if getattr(kernel, "_tapes", None) else None
    if tape is not None:
        tape.replay(stream)
        native = tape._native
        rows.append((f"  tape.replay ({len(tape.steps)} driver calls; {'compiled loop' if native else 'Python loop'})",
                     best_of(lambda: tape.replay(stream), calls)))
        if native:
            tape._native = ()  # the Python loop, for comparison
            rows.append(("  tape.replay, Python loop", best_of(lambda: tape.replay(stream), calls)))
            tape._native = native
    rows.append(("  torch.cuda._sleep(0) (a launch through torch)", best_of(lambda: torch.cuda._sleep(0), calls)))
    for name, us in rows:
        print(f"{name:<44} {us:8.2f} us")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args(argv)
    dev, h, bf = "cuda", torch.float16, torch.bfloat16
    a, b = torch.randn(64, 64, device=dev, dtype=h), torch.randn(64, 64, device=dev, dtype=h)
    s = torch.randn(64, 1024, device=dev, dtype=h)
    s2 = torch.randn(4096, 1024, device=dev, dtype=h)
    q = torch.randn(1, 8, 128, 64, device=dev, dtype=bf)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; µs per call, median of 5 rounds "
          f"of {args.calls}")
    with torch.inference_mode():
        parts("gemm fp16 64x64x64", lambda: ops.gemm(a, b), lambda: a @ b, (a, b), args.calls)
        parts("softmax fp16 64x1024", lambda: ops.softmax(s), lambda: torch.softmax(s, -1), (s,), args.calls)
        parts("softmax fp16 4096x1024", lambda: ops.softmax(s2), lambda: torch.softmax(s2, -1), (s2,), args.calls)
        parts("attention bf16 b1 h8 s128 d64 causal", lambda: ops.attention(q, q, q, causal=True),
              lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), (q, q, q), args.calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
