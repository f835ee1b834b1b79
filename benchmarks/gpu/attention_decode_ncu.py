"""One decode attention kernel launched for Nsight Compute: the hero schedule (or ``--split N``) of
b8 h32/8 q1 k8192 d128 bf16 (``--page-size N``: its K/V paged by N, pages shuffled in the pool, or dealt in pool
order with ``--in-order``), built, verified against the float64 reference, then launched once more for the
profiler to catch (the launch after the verified one).

    ncu --kernel-name regex:tracea_attn_decode --launch-skip 1 --launch-count 1 --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis --section WarpStateStats python benchmarks/gpu/attention_decode_ncu.py
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from tracea.emitters import cuda
from tracea.emitters.cuda import attention_decode as D
from tracea.kernels import relative_error, tolerance
from tracea.kernels.dtypes import to_float64
from tracea.kernels.ops.attention import Attention


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", type=int, default=0)
    ap.add_argument("--page-size", type=int, default=0)
    ap.add_argument("--in-order", action="store_true", help="pages dealt in pool order, not shuffled")
    args = ap.parse_args(argv)
    op = Attention(8, 32, 1, 128, seq_k=8192, kv_heads=8, dtype="bf16", page_size=args.page_size or None)
    from tracea.doctor import probe

    s = dataclasses.replace(D.hero_schedule(op, probe()), split=args.split)
    k = cuda.build(op, "cuda-mma-sync.attention", s, None)
    inputs = op.random_inputs(np.random.default_rng())
    if args.in_order and op.page_size:
        from attention_decode_space import in_order

        inputs["block_table"] = in_order(inputs["block_table"], op.pages)
    err = relative_error(to_float64(k(inputs), op.dtype), op.reference(inputs))
    print(k.artifact.name, "relative error", err, "verified" if err <= tolerance(op) else "NOT VERIFIED")
    k.launch()
    k._dev.stream.sync()
    return 0 if err <= tolerance(op) else 1


if __name__ == "__main__":
    sys.exit(main())
