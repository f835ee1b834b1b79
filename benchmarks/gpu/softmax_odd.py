"""Softmax rows whose length the 16-byte vector does not divide (issue 16: a GPT-2 vocabulary, 50257), beside
aligned controls: each a full `bench` (verified on fresh random inputs, then timed beside torch.softmax with
CUDA events), as planned (the hero), and with --alts the scalar schedule the hero took before rows of odd
length kept 16-byte accesses, and a few block-per-row alternatives.

    python benchmarks/gpu/softmax_odd.py [--match TEXT] [--alts]

Needs an NVIDIA GPU and PyTorch (the baseline).
"""

from __future__ import annotations

import argparse

from tracea.doctor import probe
from tracea.emitters.bench import bench
from tracea.emitters.cuda.schedule import CudaSchedule
from tracea.emitters.cuda.softmax import SHORT, _sms, hero_schedule, rows_schedule, split_schedule
from tracea.emitters.cuda.softmax_parts import row_vectors
from tracea.kernels import Softmax

# 4096 x 1000 fp32 is the list's; 1000 = 4 x 250, so its rows are aligned (its kernel is unchanged)
ODD = [Softmax(3000, 50257, "fp16"), Softmax(1024, 32001, "bf16"), Softmax(4096, 1000, "fp32"),
       Softmax(65536, 129, "fp16"), Softmax(8, 128257, "fp16")]
ALIGNED = [Softmax(512, 32768, "fp16"), Softmax(131072, 128, "fp16")]
VID = "cuda-simt.softmax"


def scalar_schedule(op: Softmax, host: object) -> CudaSchedule:
    """The hero as it was for rows the vector does not divide: one element an access (vec = 1)."""
    sms, known = _sms(host)
    if op.cols <= SHORT:
        return rows_schedule(op, 1, sms)
    if op.rows < sms:
        split = split_schedule(op, 1, sms, known=known)
        if split is not None:
            return split
    threads = min(1024, max(128, -(-op.cols // 128) * 32))
    chunks = -(-op.cols // threads)
    return CudaSchedule("softmax", threads=threads, vec=1, chunks=chunks if chunks <= 16 else 0)


def alternatives(op: Softmax, host: object) -> list[tuple[str, CudaSchedule]]:
    hero = hero_schedule(op, host)
    out = [("scalar", scalar_schedule(op, host))] if op.cols % hero.vec else []
    if not hero.lanes and not hero.split:
        for threads in (256, 512, 1024):
            chunks = -(-row_vectors(op.cols, hero.vec) // threads)
            for c in sorted({0, chunks if chunks * hero.vec <= 64 else 0}):
                s = CudaSchedule("softmax", threads=threads, vec=hero.vec, chunks=c)
                if s != hero:
                    out.append(("alt", s))
    return out


def _row(label: str, op: Softmax, r: object, name: str) -> None:
    ms = r.tracea.p50_ms if r.tracea else None
    spread = r.tracea.p95_ms / r.tracea.p50_ms if r.tracea else None
    base = r.baseline.p50_ms if r.baseline else None
    ratio = None if r.ratio is None else round(r.ratio, 2)
    gbs = round(op.bytes / ms / 1e6) if ms else None
    print(f"  {label:<8} {name:<24} {r.status:<10} {ms and round(ms, 4)!s:>8} ms (p95/p50 {spread and round(spread, 2)}) "
          f"{gbs!s:>5} GB/s  torch {base and round(base, 4)!s:>8} ms  ratio {ratio}  {r.unstable or ''} "
          f"{r.error or ''}"[:240], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="")
    ap.add_argument("--alts", action="store_true", help="also the former scalar schedule and block-per-row alternatives")
    args = ap.parse_args()
    host = probe()
    for op in ODD + ALIGNED:
        if args.match not in op.signature:
            continue
        print(f"{op.signature}  ({op.bytes / 1e6:.1f} MB read and written)", flush=True)
        r = bench(op, host, backend="cuda", repeats=20)
        _row("planned", op, r, CudaSchedule.from_json(r.schedule).name if r.schedule else "")
        for label, sched in alternatives(op, host) if args.alts else []:
            r = bench(op, host, backend="cuda", variant=VID, repeats=20, tuned=lambda _op, _v, s=sched: s.to_json())
            _row(label, op, r, sched.name)


if __name__ == "__main__":
    main()
