"""Each CUDA variant that can run an op, on the same op, in one run: which family a shape should go to.

    python benchmarks/gpu/variant_probe.py [--suite resnet50|llm-gemm|softmax] [--only-below 0.8]

Every case is a full `bench` (verified on fresh random inputs, then timed beside the vendor library with
CUDA events); rows print variant by variant, the fastest verified one marked. Needs an NVIDIA GPU.
"""

from __future__ import annotations

import argparse

from tracea.doctor import probe
from tracea.emitters import registry
from tracea.emitters.bench import bench


def cases(suite: str | None) -> list:
    ops = registry.backend("cuda").suites()
    return [op for name, group in ops.items() if suite in (None, name) for op in group]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite")
    ap.add_argument("--match", default="", help="only cases whose signature contains this text")
    args = ap.parse_args()
    host = probe()
    variants = registry.all_variants("cuda")
    for op in cases(args.suite):
        if args.match not in op.signature:
            continue
        rows = []
        for v in variants:
            if v.op != op.kind or op.dtype.value not in v.precisions or v.unmet(host, op.dtype.value):
                continue
            r = bench(op, host, backend="cuda", variant=v.id, repeats=20)
            ms = r.tracea.p50_ms if r.tracea else None
            rows.append((v.id, r.status, ms, r.baseline.p50_ms if r.baseline else None, r.ratio, r.schedule))
        best = min((x for x in rows if x[1] == "ok" and x[2]), key=lambda x: x[2], default=None)
        print(op.signature)
        for vid, status, ms, base, ratio, sched in rows:
            mark = "*" if best and vid == best[0] else " "
            name = sched.get("name") if isinstance(sched, dict) else None
            print(f"  {mark} {vid:<22} {status:<12} {ms if ms is None else round(ms, 4)!s:>8} ms  vendor "
                  f"{base if base is None else round(base, 4)!s:>8} ms  ratio {ratio if ratio is None else round(ratio, 2)}"
                  f"  {name or ''}", flush=True)


if __name__ == "__main__":
    main()
