"""Why interleaved CPU timings leave a quiet gap between contenders (emitters/timing.py, SETTLE_S).

For each case of the CPU standard suite: Tracea's kernel and its vendor baseline, both verified, timed
interleaved with no gap and with gaps of 10, 30 and 60 ms; prints each side's median, p95/p50 and
p50/min. A spread that collapses with the gap means the two libraries' idle threads were stealing each
other's cores (spin-waiting after a call), not that either kernel is noisy by itself.

    python benchmarks/bench_settle.py [--repeat 20]
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    from tracea.doctor import probe
    from tracea.emitters import registry
    from tracea.emitters.baselines import baseline_for
    from tracea.emitters.timing import interleaved
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    host = probe()
    mod = registry.backend_module("cpu")
    print(f"{'case':44s} {'gap ms':>6s} {'tracea ms':>10s} {'p95/p50':>8s} {'p50/min':>8s} "
          f"{'vendor ms':>10s} {'p95/p50':>8s} {'p50/min':>8s}")
    for op in mod.standard_suite():
        from tracea.doctor.plan import plan

        variant = registry.variant(plan(op, host, registry.all_variants("cpu"), backend="cpu").require())
        kernel = mod.build(op, variant, mod.hero_schedule(op, variant, host), host)
        inputs = op.random_inputs(np.random.default_rng(0))
        ref = op.reference(inputs)
        out = np.empty(op.output_shape(), op.dtype.storage)
        kernel(inputs, out)
        assert relative_error(to_float64(out, op.dtype), ref) <= tolerance(op)
        base = baseline_for(op, inputs)
        if base.run is None:
            print(f"{op.kind:44s} baseline unavailable: {base.reason}")
            continue
        assert relative_error(np.asarray(base.run(), dtype=np.float64), ref) <= tolerance(op)
        for gap in (0.0, 0.01, 0.03, 0.06):
            t = interleaved({"k": lambda: kernel(inputs, out), "b": base.run}, warmup=2, repeats=args.repeat,
                            settle_s=gap)
            k, b = t["k"], t["b"]
            print(f"{op.signature[:44]:44s} {gap * 1e3:6.0f} {k.p50_ms:10.3f} {k.p95_ms / k.p50_ms:8.2f} "
                  f"{k.p50_ms / k.min_ms:8.2f} {b.p50_ms:10.3f} {b.p95_ms / b.p50_ms:8.2f} {b.p50_ms / b.min_ms:8.2f}")


if __name__ == "__main__":
    main()
