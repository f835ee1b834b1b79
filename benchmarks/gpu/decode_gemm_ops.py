"""Decode GEMMs as a user's model runs them: ``tracea.ops.gemm(x, w.T)`` on an ``nn.Linear`` weight ``w`` (N x K,
read in place) beside ``F.linear(x, w)`` (cuBLAS), both checked against a float64 reference first (issue 34).

For each row:
- one call between CUDA events (the stream held busy before, so host time stays out), the L2 emptied before
  each call in two ways: ``dirty`` (a memset over twice the L2, as ``tracea bench`` and ``time_torch`` do: the L2
  is left full of written lines, which the timed call must write back as it reads) and ``clean`` (a read of
  another buffer of twice the L2 after that memset: the L2 holds only clean lines);
- ``layers``: a model's layers in sequence: 8 distinct weights (more bytes than the L2 holds) called back to back,
  20 rounds, events around the whole: time a call, host launch gaps included.

GB/s counts the weights, x and the output once; "of copy" divides by a 1 GiB device-to-device copy (bytes read +
written) measured here. Medians of ``--repeats``; p95/p50 printed beside.

    python benchmarks/gpu/decode_gemm_ops.py [--repeats 30] [--rows decode|mid|few]

Needs a CUDA GPU and PyTorch.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import tracea
from tracea.emitters.device_baselines import time_torch

ROWS = [(1, 4096, 4096), (1, 4096, 14336), (1, 14336, 4096), (16, 4096, 4096), (16, 4096, 14336),
        (8, 6144, 4096), (4, 28672, 8192)]
MID_ROWS = [(64, 4096, 4096), (128, 4096, 4096), (128, 11008, 4096), (128, 4096, 11008), (128, 14336, 4096),
            (192, 6144, 4096), (256, 4096, 14336)]  # batched decode / chunked prefill: gemm_heroes.one_wave's tiles
FEW_ROWS = [(256, 256, 16384), (128, 128, 32768), (192, 320, 16384), (64, 1024, 4096)]  # gemm_heroes.few_tiles'
HOLD = 2_000_000  # GPU clocks the stream is held before each timed call (about 1 ms)


def copy_gbps() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        dst.copy_(src)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return 2 * src.numel() / (statistics.median(ts) * 1e-3) / 1e9


def per_call(fn: Callable[[], Any], flush: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(median, p95) ms of one call, ``flush`` emptying the L2 before each (``device_baselines.time_torch``)."""
    t = time_torch(fn, 3, repeats, flush=flush, hold_cycles=HOLD)
    return t.p50_ms, t.p95_ms


def layers(fns: list[Callable[[], Any]], rounds: int = 20) -> float:
    for f in fns:
        f()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(rounds):
        for f in fns:
            f()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / (rounds * len(fns))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--rows", choices=("decode", "mid", "few"), default="decode")
    a = ap.parse_args()
    torch.manual_seed(0)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    dirty_buf = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    clean_buf = torch.zeros(2 * l2 // 4, dtype=torch.float32, device="cuda")
    flushes = {"dirty": dirty_buf.zero_, "clean": lambda: (dirty_buf.zero_(), clean_buf.sum())}
    copy = copy_gbps()
    print(f"{torch.cuda.get_device_name(0)}; device copy {copy:.0f} GB/s (1 GiB, read + written)")
    print("row             flush   tracea_ms (p95/p50)   F.linear_ms (p95/p50)  F/tracea  tracea GB/s (of copy)  "
          "F GB/s (of copy)")
    for m, n, k in {"decode": ROWS, "mid": MID_ROWS, "few": FEW_ROWS}[a.rows]:
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        ws = [(torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16) for _ in range(8)]
        ref = x.double() @ ws[0].double().T
        got_t, got_f = tracea.ops.gemm(x, ws[0].T), F.linear(x, ws[0])
        for name, got in (("tracea.ops", got_t), ("F.linear", got_f)):
            err = ((got.double() - ref).norm() / ref.norm()).item()
            if not err < 1e-2:
                raise SystemExit(f"{m}x{n}x{k}: {name} relative error {err:.2e}")
        nbytes = 2 * (m * k + n * k + m * n)
        route = str(tracea.ops.explain("gemm", x, ws[0].T)).replace("\n", " | ")[:160]
        w0 = ws[0]
        ours, theirs = (lambda x=x, w=w0: tracea.ops.gemm(x, w.T)), (lambda x=x, w=w0: F.linear(x, w))
        for label, flush in flushes.items():
            t, t95 = per_call(ours, flush, a.repeats)
            f, f95 = per_call(theirs, flush, a.repeats)
            print(f"{m}x{n}x{k:<7} {label:<6} {t:9.4f} ({t95 / t:.2f})  {f:11.4f} ({f95 / f:.2f})  {f / t:8.2f}  "
                  f"{nbytes / t / 1e6:8.0f} ({nbytes / t / 1e6 / copy:.0%})  {nbytes / f / 1e6:8.0f} "
                  f"({nbytes / f / 1e6 / copy:.0%})", flush=True)
        t = layers([lambda x=x, w=w: tracea.ops.gemm(x, w.T) for w in ws])
        f = layers([lambda x=x, w=w: F.linear(x, w) for w in ws])
        print(f"{m}x{n}x{k:<7} layers {t:9.4f}         {f:11.4f}         {f / t:8.2f}  "
              f"{nbytes / t / 1e6:8.0f} ({nbytes / t / 1e6 / copy:.0%})  {nbytes / f / 1e6:8.0f} "
              f"({nbytes / f / 1e6 / copy:.0%})  {route}", flush=True)


if __name__ == "__main__":
    main()
