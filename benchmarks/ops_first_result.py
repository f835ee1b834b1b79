"""Time to first result of ``tracea.ops.gemm`` in a fresh process, cold and warm: a shape is tuned first
(``tracea tune gemm``, stored in the tuning database of a fresh TRACEA_HOME), then new processes each
import Tracea and call ``tracea.ops.gemm`` once on fresh random inputs: process 0 right after the tuning run
(which left the tuned binary in the build cache), then, the build cache emptied (the database kept),
process 1 builds the tuned kernel (a compile: build-cache miss) and process 2 must find the binary in the
build cache and compile nothing. Each result is verified against float64 NumPy.

    python benchmarks/ops_first_result.py [--backend cpu|cuda] [--m 512] [--n 512] [--k 512] [--dtype fp32]
        [--budget 6] [--home DIR]

Prints, per process: the route's schedule source (tuned / heuristic), whether the build cache held the
binary, the time to import tracea.ops, the time of the first call (to the result on the host, a GPU result
synchronised), the process's wall time, and the error. Exit 1 when process 0 or 2 compiled, process 1 did not, the
schedule was not the tuned one, or a result is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import tracea.ops as ops
t1 = time.perf_counter()
m, n, k, dtype, backend = {m}, {n}, {k}, {dtype!r}, {backend!r}
rng = np.random.default_rng()
a64, b64 = rng.standard_normal((m, k)), rng.standard_normal((k, n))
if backend == "cuda":
    import torch
    td = {{"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}}[dtype]
    a, b = (torch.from_numpy(x).to("cuda", td) for x in (a64, b64))
    a64, b64 = (x.double().cpu().numpy() for x in (a, b))  # the rounded inputs the kernel sees
    torch.cuda.synchronize()
else:
    a, b = a64.astype(np.float32), b64.astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
t2 = time.perf_counter()
y = ops.gemm(a, b)
if backend == "cuda":
    torch.cuda.synchronize()
    y = y.double().cpu().numpy()
t3 = time.perf_counter()
want = a64 @ b64
r = ops.explain()
print(json.dumps({{"path": r.path, "source": r.schedule_source, "hit": r.build_cache_hit, "kernel": r.kernel,
                  "reason": r.reason, "import_s": t1 - t0, "first_call_s": t3 - t2,
                  "err": float(np.linalg.norm(np.asarray(y, np.float64) - want) / np.linalg.norm(want))}}))
"""


def child(args: argparse.Namespace, env: dict[str, str]) -> dict:
    code = CHILD.format(m=args.m, n=args.n, k=args.k, dtype=args.dtype, backend=args.backend)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"the child process failed:\n{out.stderr[-3000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["wall_s"] = wall
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), default=None, help="default: fp32 on cpu, bf16 on cuda")
    ap.add_argument("--budget", type=int, default=6, help="evaluations of the tuning run")
    ap.add_argument("--home", default=None, help="TRACEA_HOME to use (default: a fresh temporary one)")
    args = ap.parse_args(argv)
    args.dtype = args.dtype or ("fp32" if args.backend == "cpu" else "bf16")
    home = args.home or tempfile.mkdtemp(prefix="tracea-first-")
    env = {**os.environ, "TRACEA_HOME": home}
    tune = [sys.executable, "-m", "tracea", "tune", "gemm", "--m", str(args.m), "--n", str(args.n), "--k", str(args.k),
            "--dtype", args.dtype, "--backend", args.backend, "--budget", str(args.budget), "--no-tui"]
    t = time.perf_counter()
    out = subprocess.run(tune, capture_output=True, text=True, env=env, timeout=1800)
    print(f"tune: {' '.join(tune[1:])} -> rc {out.returncode} in {time.perf_counter() - t:.1f} s (TRACEA_HOME={home})")
    if out.returncode != 0:
        print(out.stdout[-2000:], out.stderr[-2000:])
        return 1
    rows = [child(args, env)]
    shutil.rmtree(os.path.join(home, "cache"), ignore_errors=True)  # the build cache (the database stays)
    rows += [child(args, env) for _ in range(2)]
    print(f"{'process':<8} {'path':<7} {'schedule':<9} {'build cache':<12} {'import':>8} {'first call':>11} "
          f"{'wall':>8} {'rel err':>9}  kernel")
    for i, r in enumerate(rows):
        hit = {True: "hit", False: "miss", None: "-"}[r["hit"]]
        print(f"{i:<8} {r['path']:<7} {str(r['source']):<9} {hit:<12} {r['import_s']:7.2f}s {r['first_call_s']:10.3f}s "
              f"{r['wall_s']:7.2f}s {r['err']:9.1e}  {r['kernel'] or r['reason']}")
    ok = (all(r["path"] == "tracea" and r["source"] == "tuned" and r["err"] < 2e-2 for r in rows)
          and rows[0]["hit"] is True and rows[1]["hit"] is False and rows[2]["hit"] is True)
    print("ok: the second process compiled nothing" if ok else "NOT OK")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
