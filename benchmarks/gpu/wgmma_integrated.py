"""cuda-wgmma through the CUDA emitter's own path (cuda.build -> WgmmaKernel: cuda-core buffers, host
tensor maps, CudaKernel.time with L2 flush), verified against the IR's float64 reference on fresh random
inputs. Complements wgmma_run.py, which drives the kernel directly next to torch.

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu/wgmma_integrated.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
import wgmma_run  # noqa: E402,F401 - maps the source folders onto the tracea package names

from tracea.emitters import cuda  # noqa: E402
from tracea.emitters.cuda import hopper as W  # noqa: E402
from tracea.kernels import Gemm, relative_error, tolerance  # noqa: E402
from tracea.kernels.dtypes import to_float64  # noqa: E402


class NoProbe:
    nvidia = None  # the emitter asks cuda-core for the GPU's compute capability


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/wgmma_out"))
    args = ap.parse_args()
    rng = np.random.default_rng(int(time.time()))
    host = NoProbe()
    recs = []
    ops = [Gemm(1000, 1000, 1000, "bf16", epilogue=("bias", "gelu", "scale", "residual"), alpha=0.75),
           Gemm(4097, 520, 1001, "bf16"), Gemm(2048, 2048, 2048, "fp16", layout_b="col"),
           Gemm(8, 4096, 4096, "bf16"), Gemm(4096, 4096, 4096, "bf16")]
    jobs = [(op, None) for op in ops] + [(ops[-1], W.WgmmaSchedule(store="tma")),
                                         (Gemm(777, 1001, 264, "fp16", epilogue=("residual",)), W.WgmmaSchedule(store="tma"))]
    for op, chosen in jobs:
        rec = {"op": op.signature}
        try:
            sched = chosen or cuda.hero_schedule(op, "cuda-wgmma.gemm", host)
            kernel = cuda.build(op, "cuda-wgmma.gemm", sched, host)
            rec.update(kernel=type(kernel).__name__, schedule=sched.name, padding=kernel.padding)
            inputs = op.random_inputs(rng)
            out = kernel(inputs)
            err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
            rec.update(rel_err=err, ok=err <= tolerance(op))
            t = kernel.time(inputs, warmup=5, repeats=20)
            rec.update(p50_ms=t.p50_ms, p95_ms=t.p95_ms, tflops=op.flops / t.p50_ms / 1e9)
        except Exception as exc:  # noqa: BLE001 - recorded
            rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1500])
        print("integrated", json.dumps(rec, default=str))
        recs.append(rec)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "integrated.json").write_text(json.dumps(recs, indent=1, default=str))
    return 0 if all(r.get("ok") for r in recs) else 1


if __name__ == "__main__":
    sys.exit(main())
