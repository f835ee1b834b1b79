"""The Hopper wgmma attention kernel on issue 17's cases: each built (hero, or several schedules with
--sweep), verified on fresh random inputs against the float64 reference (large cases on a few
(batch, head) slices), then timed with CUDA events beside torch SDPA's fastest backend in the same run.

    python benchmarks/gpu/wgmma_attention_probe.py [--quick] [--extra] [--sweep] [--persistent] [--match TEXT]
        [--alts "bk=32,stages=4;..."] [--json FILE]

Prints case, schedule, ms (median), TFLOP/s (op.flops / time: kept pairs only), the baseline's ms and
name, the ratio (baseline ms / ours), and p95/p50 of each. One failing case prints its error; the rest go
on. Needs an sm_90 GPU; torch for the baseline (without it the kernel is still verified and timed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import traceback
from typing import Any

import numpy as np

from tracea.emitters.cuda.hopper.attention_kernel import build
from tracea.emitters.cuda.hopper.attention_schedule import AttnWgmmaSchedule, hero_schedule
from tracea.kernels import Attention, relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import LSE_TOLERANCE, lse_error

FULL_CHECK_ELEMENTS = 2 ** 26  # seq_q x seq_k x heads x batch above this: check slices only


def block_mask(seq: int, block: int, density: float, seed: int = 0) -> tuple[str, ...]:
    rng = np.random.default_rng(seed)
    n = -(-seq // block)
    m = rng.random((n, n)) < density
    return tuple("".join("1" if b else "0" for b in r) for r in m)


def cases(quick: bool, extra: bool = False) -> list[tuple[str, Attention]]:
    bf = "bf16"
    out = [
        ("d128 b4 h32 s4096", Attention(4, 32, 4096, 128, dtype=bf)),
        ("d128 b4 h32 s4096 causal", Attention(4, 32, 4096, 128, dtype=bf, causal=True)),
    ]
    if quick:
        return out
    if extra:  # short and middling sequences outside the table, for the persistent form's rule
        out += [("d128 b16 h32 s512", Attention(16, 32, 512, 128, dtype=bf)),
                ("d64 b4 h32 s2048", Attention(4, 32, 2048, 64, dtype=bf)),
                ("d64 b16 h32 s512 causal", Attention(16, 32, 512, 64, dtype=bf, causal=True))]
    return out + [
        ("d64 b16 h32 s512", Attention(16, 32, 512, 64, dtype=bf)),
        ("d256 b16 h32 s512", Attention(16, 32, 512, 256, dtype=bf)),
        ("d64 b1 h32 s16384 causal", Attention(1, 32, 16384, 64, dtype=bf, causal=True)),
        ("d256 b1 h32 s16384 causal", Attention(1, 32, 16384, 256, dtype=bf, causal=True)),
        ("gqa 32/8 d128 b4 s4096 causal", Attention(4, 32, 4096, 128, kv_heads=8, dtype=bf, causal=True)),
        ("window +-1024 d128 b1 h32 s16384", Attention(1, 32, 16384, 128, dtype=bf, window=(1024, 1024))),
        # issue 33's narrow window: 5 % of the 128 x 128 tiles (the issue names no batch or heads)
        ("window 256,0 d64 b1 h32 s8192", Attention(1, 32, 8192, 64, dtype=bf, window=(256, 0))),
        ("window 256,0 d64 b4 h32 s8192", Attention(4, 32, 8192, 64, dtype=bf, window=(256, 0))),
        ("blockmask 25% 128 d128 b1 h32 s16384",
         Attention(1, 32, 16384, 128, dtype=bf, block_size=(128, 128), block_mask=block_mask(16384, 128, 0.25))),
        ("fp16 d128 b4 h32 s4096 causal", Attention(4, 32, 4096, 128, dtype="fp16", causal=True)),
    ]


def parse_alts(text: str) -> list[dict[str, Any]]:
    """``--alts "bk=32,stages=4;bk=48,intra=true"``: field overrides of the hero, one schedule each."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        fields: dict[str, Any] = {}
        for kv in part.split(","):
            key, _, val = kv.partition("=")
            fields[key.strip()] = {"true": True, "false": False}.get(val.strip().lower(), None)
            if fields[key.strip()] is None:
                fields[key.strip()] = int(val)
        out.append(fields)
    return out


def schedules(op: Attention, sweep: bool, persistent: bool = False,
              alts_of_hero: list[dict[str, Any]] | None = None) -> list[AttnWgmmaSchedule]:
    """The hero; with ``sweep`` its variants and the persistent forms of each (one Q buffer, two); with
    ``persistent`` the hero beside its persistent forms (as is, the other intra-warpgroup overlap, 2
    stages, each also with two Q buffers); ``alts_of_hero``: the hero with these fields changed. Forms that
    do not fit the head dim are left out."""
    hero = hero_schedule(op)
    pe = dataclasses.replace(hero, persistent=True)
    alts = [hero]
    if persistent:
        alts += [pe, dataclasses.replace(pe, intra=not hero.intra), dataclasses.replace(pe, stages=2)]
        alts += [dataclasses.replace(s, q_buffers=2) for s in alts[1:]]
        if op.head_dim == 64:  # three consumers (192-row tiles, FlashAttention-3's at this head dim)
            c3 = dataclasses.replace(hero, consumers=3, stages=2, persistent=False, q_buffers=1)
            alts += [c3, dataclasses.replace(c3, stages=3), dataclasses.replace(c3, persistent=True),
                     dataclasses.replace(c3, persistent=True, q_buffers=2), dataclasses.replace(c3, intra=False)]
        if op.head_dim == 256:  # 80-key tiles (FlashAttention-3's at this head dim), each overlap
            alts += [dataclasses.replace(hero, bk=80, intra=i) for i in (False, True)]
    if sweep:
        alts += [dataclasses.replace(hero, pingpong=False), dataclasses.replace(hero, intra=False),
                 dataclasses.replace(hero, pingpong=False, intra=False), dataclasses.replace(hero, stages=2),
                 dataclasses.replace(hero, consumers=1, pingpong=False)]
        if op.head_dim <= 128:
            alts.append(dataclasses.replace(hero, bk=64, stages=4))
        alts += [dataclasses.replace(s, persistent=True, q_buffers=q) for q in (1, 2) for s in alts]
    alts += [dataclasses.replace(hero, **fields) for fields in alts_of_hero or ()]
    out = []
    for s in alts:
        try:
            s.validate(op)
        except Exception:  # noqa: BLE001 - a variant that does not fit this head dim
            continue
        if s not in out:
            out.append(s)
    return out


def slice_op(op: Attention, inputs: dict[str, np.ndarray], b: int, h: int) -> tuple[Attention, dict[str, np.ndarray]]:
    """One (batch, head) of ``op`` as its own op, with its inputs (the kv head it reads)."""
    kvh = h // (op.heads // op.kv_heads)
    sub = dataclasses.replace(op, batch=1, heads=1, kv_heads=1)
    return sub, {"q": inputs["q"][b:b + 1, h:h + 1], "k": inputs["k"][b:b + 1, kvh:kvh + 1],
                 "v": inputs["v"][b:b + 1, kvh:kvh + 1]}


def verify(op: Attention, inputs: dict[str, np.ndarray], out: np.ndarray, lse: np.ndarray) -> dict[str, Any]:
    """Relative error of O and the lse error, on the whole op or on three (batch, head) slices."""
    if op.batch * op.heads * op.seq_q * op.seq_k <= FULL_CHECK_ELEMENTS:
        ref, ref_lse = op.reference_with_lse(inputs)
        return {"rel_err": relative_error(to_float64(out, op.dtype), ref), "lse_err": lse_error(lse, ref_lse),
                "checked": "all"}
    errs, lerrs, picks = [], [], [(0, 0), (op.batch - 1, op.heads - 1), (op.batch // 2, op.heads // 2)]
    for b, h in picks:
        sub, sin = slice_op(op, inputs, b, h)
        ref, ref_lse = sub.reference_with_lse(sin)
        errs.append(relative_error(to_float64(out[b:b + 1, h:h + 1], op.dtype), ref))
        lerrs.append(lse_error(lse[b:b + 1, h:h + 1], ref_lse))
    return {"rel_err": max(errs), "lse_err": max(lerrs), "checked": f"slices {picks}"}


def baseline(op: Attention, inputs: dict[str, np.ndarray], warmup: int, repeats: int) -> dict[str, Any]:
    from tracea.emitters.device_baselines import time_torch, torch_baseline

    base = torch_baseline(op, inputs)
    if base.run is None:
        return {"baseline": None, "baseline_reason": base.reason}
    t = time_torch(base.run, warmup, repeats)
    return {"baseline": base.name, "baseline_ms": t.p50_ms, "baseline_p95_p50": t.p95_ms / t.p50_ms}


def run_case(label: str, op: Attention, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    inputs = op.random_inputs(np.random.default_rng(17))
    base: dict[str, Any] | None = None
    for sched in schedules(op, args.sweep, args.persistent, parse_alts(args.alts)):
        row: dict[str, Any] = {"case": label, "schedule": sched.name, "flops": op.flops}
        rows.append(row)
        try:
            k = build(op, sched)
            out = np.full(op.output_shape(), 0x7FC0 if op.dtype.value == "bf16" else 0x7E00, op.dtype.storage)
            lse = np.full(op.lse_shape(), np.nan, np.float32)
            k.forward(inputs, out, lse)
            row.update(verify(op, inputs, out, lse))
            row["ok"] = row["rel_err"] <= tolerance(op) and row["lse_err"] <= LSE_TOLERANCE
            t = k.time(inputs, warmup=args.warmup, repeats=args.repeats)
            row.update(ms=t.p50_ms, grid=k.grid, p95_p50=t.p95_ms / t.p50_ms, tflops=op.flops / t.p50_ms / 1e9,
                       registers=k.artifact.metadata["resources"]["regs_per_thread"],
                       spills=k.artifact.metadata["resources"]["spill_stores"])
            del k
            if base is None:
                base = baseline(op, inputs, args.warmup, args.repeats)
            row.update(base)
            if base.get("baseline_ms"):
                row["ratio"] = base["baseline_ms"] / row["ms"]
        except Exception as exc:  # noqa: BLE001 - one failing case is reported, the rest go on
            row["error"] = f"{type(exc).__name__}: {exc}"
            if args.verbose:
                traceback.print_exc()
        print_row(row)
    return rows


def print_row(r: dict[str, Any]) -> None:
    if "error" in r and "ms" not in r:
        print(f"{r['case']:<38} {r['schedule']:<34} ERROR {r['error'][:200]}", flush=True)
        return
    ok = "ok" if r.get("ok") else f"WRONG (rel {r.get('rel_err', float('nan')):.3g}, lse {r.get('lse_err', 0):.3g})"
    base = (f"{r['baseline_ms']:8.3f} ms {r['baseline_p95_p50']:.2f}  x{r['ratio']:.3f}  {r['baseline'][:70]}"
            if r.get("baseline_ms") else f"no baseline ({r.get('baseline_reason')})")
    print(f"{r['case']:<38} {r['schedule']:<34} {r['ms']:8.3f} ms {r['tflops']:6.1f} TFLOP/s grid {r['grid']} p95/p50 "
          f"{r['p95_p50']:.2f} regs {r['registers']} {ok} | {base}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two headline cases")
    ap.add_argument("--sweep", action="store_true", help="several schedules per case, each also persistent")
    ap.add_argument("--persistent", action="store_true", help="the hero beside its persistent forms")
    ap.add_argument("--extra", action="store_true", help="also cases outside the issue's table (short sequences)")
    ap.add_argument("--match", default="", help="only cases whose label contains this (or one of A|B|...)")
    ap.add_argument("--alts", default="", help='the hero with fields changed, e.g. "bk=32,stages=4;bk=48"')
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    from tracea.emitters.cuda.runtime import _Device

    dev = _Device.get().dev
    print(f"device: {getattr(dev, 'name', '?')} cc {dev.compute_capability}", flush=True)
    rows: list[dict[str, Any]] = []
    for label, op in cases(args.quick, args.extra):
        if args.match and not any(m in label for m in args.match.split("|")):
            continue
        try:
            rows += run_case(label, op, args)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory building the inputs
            print(f"{label:<38} ERROR {type(exc).__name__}: {exc}", flush=True)
            rows.append({"case": label, "error": f"{type(exc).__name__}: {exc}"})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(getattr(dev, "name", "?")), "rows": rows}, f, indent=1, default=str)
    bad = [r for r in rows if "error" in r or not r.get("ok")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
