"""CUDA attention against torch SDPA, case by case (issue 17's list): each case's hero schedule is built,
verified (O and lse) against the float64 reference on fresh random inputs (big cases on a few
(batch, head) slices, the reference run on those slices alone), then timed with CUDA events beside the
SDPA baseline (emitters/device_baselines.py; the fastest of its backends) in the same run.

    python benchmarks/gpu/attention_probe.py [--variant cuda-mma-sync.attention|cuda-wgmma.attention ...]
        [--cases issue|head-dims|odd-head-dims] [--quick] [--match TEXT] [--json FILE] [--schedule JSON]

``--cases head-dims``: issue 33's head dims (32, 80, 96, 160, with 128 beside them) at B4 H32 S4096 bf16,
causal and not. Several variants: each case runs on each in turn (same inputs, SDPA timed beside each).

Needs a GPU (sm_80+; sm_90a for the wgmma variant) and PyTorch (the baseline).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import numpy as np

from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, Attention, lse_error

SLICES = 3  # (batch, head) slices verified in a big case


def _mask(op: Attention, density: float) -> Attention:
    from tracea.attention_options import random_block_mask

    return dataclasses.replace(op, block_mask=random_block_mask(op, density))


def cases() -> list[tuple[str, Attention]]:
    a = Attention
    return [
        ("d128 s4096 b4 h32", a(4, 32, 4096, 128, dtype="bf16")),
        ("d128 s4096 b4 h32 causal", a(4, 32, 4096, 128, dtype="bf16", causal=True)),
        ("d64 s512 b16 h32", a(16, 32, 512, 64, dtype="bf16")),
        ("d256 s512 b16 h32", a(16, 32, 512, 256, dtype="bf16")),
        ("d64 s16384 b1 h32 causal", a(1, 32, 16384, 64, dtype="bf16", causal=True)),
        ("d128 s16384 b1 h32 causal", a(1, 32, 16384, 128, dtype="bf16", causal=True)),
        ("d256 s16384 b1 h32 causal", a(1, 32, 16384, 256, dtype="bf16", causal=True)),
        ("gqa 32/8 d128 s4096 b4 causal", a(4, 32, 4096, 128, kv_heads=8, dtype="bf16", causal=True)),
        ("window 1024 d128 s16384 b1 h32", a(1, 32, 16384, 128, dtype="bf16", window=(1024, 1024))),
        # issue 33's narrow window (5 % of the 128 x 128 tiles; the issue names no batch or heads: those of the
        # other long-sequence rows)
        ("window 256,0 d64 s8192 b1 h32", a(1, 32, 8192, 64, dtype="bf16", window=(256, 0))),
        ("blockmask 25% d128 s16384 b1 h32", _mask(a(1, 32, 16384, 128, dtype="bf16"), 0.25)),
    ]


def head_dim_cases(dims: tuple[int, ...] = (80, 96, 160, 32, 128)) -> list[tuple[str, Attention]]:
    """Head dims that are no multiple of 64 (and 128 beside them) at the issue's headline shape, both masks;
    ``odd-head-dims``: odd multiples of 8 (computed over the next multiple of 16) with their neighbours."""
    return [(f"d{d} s4096 b4 h32" + (" causal" if causal else ""), Attention(4, 32, 4096, d, dtype="bf16", causal=causal))
            for d in dims for causal in (False, True)]


QUICK = ("d128 s4096 b4 h32", "d128 s4096 b4 h32 causal", "window 1024 d128 s16384 b1 h32")


def _slice_op(op: Attention) -> Attention:
    return dataclasses.replace(op, batch=1, heads=op.heads // op.kv_heads, kv_heads=1)


def verify(op: Attention, out: np.ndarray, lse: np.ndarray, inputs: dict[str, np.ndarray]) -> tuple[float, float]:
    """(relative error of O, lse error) over SLICES (batch, kv head) groups of ``op`` (all when small)."""
    group = op.heads // op.kv_heads
    picks = [(b, g) for b in range(op.batch) for g in range(op.kv_heads)]
    if op.batch * op.heads * op.seq_q * op.seq_k > 2**28:
        rng = np.random.default_rng(0)
        picks = [picks[i] for i in sorted(rng.choice(len(picks), size=min(SLICES, len(picks)), replace=False))]
    sub = _slice_op(op)
    err, lerr = 0.0, 0.0
    for b, g in picks:
        hs = slice(g * group, (g + 1) * group)
        part = {"q": inputs["q"][b:b + 1, hs], "k": inputs["k"][b:b + 1, g:g + 1], "v": inputs["v"][b:b + 1, g:g + 1]}
        ref, ref_lse = sub.reference_with_lse(part)
        err = max(err, relative_error(to_float64(out[b:b + 1, hs], op.dtype), ref))
        lerr = max(lerr, lse_error(lse[b:b + 1, hs], ref_lse))
    return err, lerr


_INPUTS: dict = {}


def _inputs(op: Attention) -> dict[str, np.ndarray]:
    """The case's random inputs (seed 1), kept for the next case of the same shapes (the causal twin)."""
    key = (op.batch, op.heads, op.kv_heads, op.seq_q, op.seq_k, op.head_dim, op.dtype.value)
    if key not in _INPUTS:
        _INPUTS.clear()
        _INPUTS[key] = op.random_inputs(np.random.default_rng(1))
    return _INPUTS[key]


def run_case(label: str, op: Attention, variant: str, schedule: dict | None, repeats: int) -> dict:
    from tracea.emitters import cuda
    from tracea.emitters.device_baselines import time_torch, torch_baseline

    sched = cuda.schedule_from_json(schedule) if schedule else cuda.hero_schedule(op, variant, None)
    row: dict = {"case": label, "op": op.signature, "variant": variant, "schedule": sched.to_json(),
                 "schedule_name": getattr(sched, "name", "")}
    kernel = cuda.build(op, variant, sched, None)
    inputs = _inputs(op)
    out, lse = kernel.forward(inputs)
    err, lerr = verify(op, out, lse, inputs)
    row.update(rel_err=err, lse_err=lerr, verified=bool(err <= tolerance(op) and lerr <= LSE_TOLERANCE),
               regs=kernel.artifact.metadata.get("resources", {}).get("regs_per_thread"))
    t = kernel.time(inputs, repeats=repeats)
    row.update(ms=t.p50_ms, p95_ms=t.p95_ms, tflops=op.flops / (t.p50_ms * 1e-3) / 1e12)
    base = torch_baseline(op, inputs)
    row["baseline"] = base.name
    if base.run is not None:
        bt = time_torch(base.run, 3, repeats)
        row.update(baseline_ms=bt.p50_ms, baseline_p95_ms=bt.p95_ms, ratio=bt.p50_ms / t.p50_ms)
    else:
        row["baseline_error"] = base.reason
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", nargs="+", default=["cuda-mma-sync.attention"],
                    choices=("cuda-mma-sync.attention", "cuda-wgmma.attention"))
    ap.add_argument("--cases", default="issue", choices=("issue", "head-dims", "odd-head-dims"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--match", default="")
    ap.add_argument("--json", default=None)
    ap.add_argument("--schedule", default=None, help="a schedule's JSON, used for every case instead of the hero")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    schedule = json.loads(args.schedule) if args.schedule else None
    rows = []
    width = 34 if len(args.variant) == 1 else 42
    print(f"{'case':{width}} {'schedule':16} {'ok':>3} {'ms':>8} {'TFLOP/s':>8} {'base ms':>8} {'ratio':>6} "
          f"{'p95/p50':>7}  baseline")
    chosen = {"issue": cases, "head-dims": head_dim_cases, "odd-head-dims": lambda: head_dim_cases((72, 80, 40, 48, 136, 144))}
    for label, op in chosen[args.cases]():
        if (args.quick and label not in QUICK) or args.match not in label:
            continue
        for variant in args.variant:
            name = label if len(args.variant) == 1 else f"{label} [{variant.split('.')[0].removeprefix('cuda-')}]"
            try:
                row = run_case(label, op, variant, schedule, args.repeats)
            except Exception as exc:  # noqa: BLE001 - one case's failure is a row, the probe goes on
                row = {"case": label, "op": op.signature, "variant": variant, "error": f"{type(exc).__name__}: {exc}"}
                print(f"{name:{width}} error: {row['error'][:200]}")
            else:
                print(f"{name:{width}} {row['schedule_name']:16} {'yes' if row['verified'] else 'NO':>3} "
                      f"{row['ms']:8.3f} {row['tflops']:8.1f} {row.get('baseline_ms', float('nan')):8.3f} "
                      f"{row.get('ratio', float('nan')):6.2f} {row['p95_ms'] / row['ms']:7.2f}  {row['baseline'][:60]}"
                      + ("" if row["verified"] else f"  (err {row['rel_err']:.3g}, lse {row['lse_err']:.3g})"))
            rows.append(row)
            sys.stdout.flush()
            if args.json:  # after each row: a run stopped at its time limit keeps what it measured
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1, default=str)
    return 0 if all(r.get("verified") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
