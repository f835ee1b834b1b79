"""Does the bank simulator's pruning verdict cost time on the GPU? Times mma.sync GEMM schedules that the
tuner drops for bank conflicts (swizzle none, sw<3,4,3>) beside the same tiles on `auto` and xor8, each
verified first, CUDA events, L2 flushed; prints the simulator's conflict wavefronts per k tile beside the
time. `python benchmarks/gpu/swizzle_check.py` (a GPU; benchmarks/gpu/shim.sh for an uninstalled tree)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tracea.doctor import probe
from tracea.emitters import cuda
from tracea.emitters.bank_sim import simulate
from tracea.emitters.cuda.smem import mainloop_accesses
from tracea.kernels import Gemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64


def main() -> None:
    host = probe()
    op = Gemm(4096, 4096, 4096, dtype="bf16")
    v = cuda.resolve("cuda-mma-sync.gemm")
    inputs = op.random_inputs(np.random.default_rng(7))
    ref = op.reference(inputs)
    print(f"{'schedule':<40} {'conflicts/k tile':>16} {'p50 ms':>8} {'p95 ms':>8} {'vs auto':>8}")
    for base in (cuda.CudaSchedule("mma", 128, 128, 64, 64, 64, 3, raster=8),
                 cuda.CudaSchedule("mma", 128, 128, 32, 64, 64, 4, raster=8)):
        auto_ms = None
        for sw in ("auto", "xor8", "none", "sw<3,4,3>"):
            s = dataclasses.replace(base, swizzle=sw)
            try:
                s.validate(op)
                conflicts = simulate(mainloop_accesses(op, s)).totals()["conflicts"]
            except Exception as exc:  # noqa: BLE001 - a swizzle that does not fit this tile
                print(f"{s.name:<40} invalid: {exc}")
                continue
            k = cuda.build(op, v, s, host)
            out = np.full(op.output_shape(), np.nan, op.dtype.storage)
            k(inputs, out)
            err = relative_error(to_float64(out, op.dtype), ref)
            if not err <= tolerance(op):
                print(f"{s.name:<40} WRONG rel err {err:.3g}")
                continue
            t = k.time(inputs, 5, 50, flush_l2=True)
            auto_ms = auto_ms or t.p50_ms
            print(f"{s.name:<40} {conflicts:>16} {t.p50_ms:>8.4f} {t.p95_ms:>8.4f} {auto_ms / t.p50_ms:>8.3f}")


if __name__ == "__main__":
    main()
