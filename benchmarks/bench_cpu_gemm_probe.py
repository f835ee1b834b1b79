"""Quick perf loop for the CPU GEMM: Tracea against NumPy (its OpenBLAS) in the same process.

For each size: build the kernel (the hero schedule unless overridden), verify it against the float64
reference on fresh random inputs, warm both up, then time them interleaved: every round calls Tracea
and NumPy once each (the order alternates between rounds), each call timed with time.perf_counter
around the full call into a preallocated output. Medians; ratio = NumPy time / Tracea time.

OpenBLAS's idle workers: after each call they busy-wait (a nop loop, no yield) for 2^28 TSC cycles
(about 0.1 s here) before sleeping, so whatever runs right after a NumPy call has one core fewer for
that time. On a 2-core machine that halves the next contender's second thread. The script therefore
runs two passes, each in a fresh process (the setting is read when OpenBLAS loads):

  1. OpenBLAS as configured (the spin included);
  2. OPENBLAS_THREAD_TIMEOUT=12: OpenBLAS's documented knob, its workers spin 2^12 cycles, then sleep.
     NumPy's own speed is unchanged by it (compare its column between the passes).

    python benchmarks/bench_cpu_gemm_probe.py                  # 1024 2048 4096, both passes
    python benchmarks/bench_cpu_gemm_probe.py 2048 --pass 2 --mr 6 --nr 64
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import time

PASSES = {1: ("OpenBLAS as configured", None), 2: ("OPENBLAS_THREAD_TIMEOUT=12", "12")}
KNOBS = ("mr", "nr", "mc", "kc", "nc", "threads", "unroll", "prefetch")


def idle_fraction(seconds: float = 0.5) -> float:
    """Share of CPU time the whole machine spent idle over ``seconds`` (Linux /proc/stat)."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)
    try:
        i0, t0 = read()
        time.sleep(seconds)
        i1, t1 = read()
    except OSError:
        return float("nan")
    return (i1 - i0) / max(1, t1 - t0)


def wait_for_quiet(limit_s: float = 120.0) -> float:
    """Other work on the machine skews both contenders: wait (up to a limit) until it is idle."""
    deadline = time.monotonic() + limit_s
    while True:
        idle = idle_fraction()
        if idle != idle or idle >= 0.95 or time.monotonic() > deadline:
            return idle


def run(size: int, args: argparse.Namespace, host) -> tuple[float, float, float, float]:
    import numpy as np

    from tracea.emitters import cpu
    from tracea.kernels import Gemm, relative_error, tolerance

    op = Gemm(size, size, size)
    variant = cpu.resolve(args.variant)
    sched = cpu.hero_schedule(op, variant, host)
    sched = dataclasses.replace(sched, **{k: getattr(args, k) for k in KNOBS if getattr(args, k) is not None})
    kernel = cpu.build(op, variant, sched, host)
    inputs = op.random_inputs(np.random.default_rng())
    out = np.empty(op.output_shape(), np.float32)
    kernel(inputs, out)
    err = relative_error(out, op.reference(inputs))
    if not err <= tolerance(op):
        raise SystemExit(f"{size}: wrong result, relative error {err:.3g}")
    a, b = inputs["a"], inputs["b"]
    ref = np.empty_like(out)
    contenders = [lambda: kernel(inputs, out), lambda: np.matmul(a, b, out=ref)]
    repeats = args.repeats or {1024: 31, 2048: 15}.get(size, 7)
    idle = wait_for_quiet()
    for _ in range(3):
        for fn in contenders:
            fn()
    times: list[list[float]] = [[], []]
    for i in range(repeats):
        for which in ((0, 1) if i % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            contenders[which]()
            times[which].append(time.perf_counter() - t0)
    tr, nb = statistics.median(times[0]), statistics.median(times[1])
    return op.flops / tr / 1e9, op.flops / nb / 1e9, err, idle


def inner(args: argparse.Namespace) -> None:
    import numpy as np

    from tracea.doctor import probe

    host = probe()
    print(f"# {host.cpu.model}, {host.cpu.logical_cores} logical cores; NumPy {np.__version__}, "
          f"{openblas_config()}; OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT', 'unset')}")
    print(f"{'size':>6} {'Tracea GFLOP/s':>15} {'NumPy GFLOP/s':>14} {'ratio':>6}  {'rel.err':>7}  idle before")
    for size in args.sizes:
        tr, nb, err, idle = run(size, args, host)
        print(f"{size:>6} {tr:>15.1f} {nb:>14.1f} {tr / nb:>6.3f}  {err:>7.1e}  {idle:.0%}", flush=True)


def openblas_config() -> str:
    try:
        import ctypes
        import glob

        import numpy as np

        libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
        for path in libs:
            lib = ctypes.CDLL(path)
            for name in ("scipy_openblas_get_config64_", "openblas_get_config64_", "openblas_get_config"):
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn.restype = ctypes.c_char_p
                    return fn().decode()
    except OSError:
        pass
    return "BLAS configuration unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="*", type=int, default=[1024, 2048, 4096])
    ap.add_argument("--variant", default="cpu-avx512.gemm")
    ap.add_argument("--repeats", type=int, default=0, help="rounds (default 31 / 15 / 7 by size)")
    ap.add_argument("--pass", dest="passes", type=int, action="append", choices=sorted(PASSES),
                    help="run only this pass (default: both)")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    for k in KNOBS:
        ap.add_argument(f"--{k}", type=int, help="override the hero schedule's " + k)
    args = ap.parse_args()
    if args.inner:
        inner(args)
        return
    forwarded = _strip_pass(sys.argv[1:])
    for number in args.passes or sorted(PASSES):
        title, timeout = PASSES[number]
        print(f"\n## pass {number}: {title}", flush=True)
        env = dict(os.environ)
        if timeout is None:
            env.pop("OPENBLAS_THREAD_TIMEOUT", None)
        else:
            env["OPENBLAS_THREAD_TIMEOUT"] = timeout
        subprocess.run([sys.executable, __file__, "--inner", *forwarded], env=env, check=True)


def _strip_pass(argv: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in argv:
        if skip or a == "--pass":
            skip = a == "--pass"
            continue
        if not a.startswith("--pass="):
            out.append(a)
    return out


if __name__ == "__main__":
    main()
