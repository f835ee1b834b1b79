"""Record a complete search space: every candidate `tracea tune` would search for one op (the variant's
space, as tuner/space.py ``build_space`` makes it) compiled, verified and timed, crashes and wrong results
recorded as such, into the tuner's recorded-space JSON (tuner/recorded.py) that `tracea tune --simulate`
and benchmarks/bench_tuner.py replay.

    . benchmarks/gpu/shim.sh   # on the GPU machine, from a plain checkout
    python benchmarks/gpu/record_space.py --op gemm --m 4096 --n 4096 --k 4096 --dtype bf16 \\
        --variant cuda-wgmma.gemm --out $OUT/wgmma_4096.json [--limit 8] [--jobs 16] [--space FILE]

Two phases, so the timings are never disturbed by a compile:
1. every candidate is built by ``--jobs`` tuner workers at once (``{"kind": "compile"}`` requests of
   tuner/worker.py: NVRTC is CPU-bound; each build lands in the content-hash cache); a build that fails
   is recorded and never measured;
2. the built ones are measured one at a time by the tuner's own evaluator (tuner/evaluate.py
   ``LiveEvaluator``: a worker process per candidate run, poisoned output verified against the float64
   reference, then timed; a fault or a hang is a recorded status and the worker is restarted), then
   the vendor baseline once.

The file is rewritten atomically (doctor/files.write_atomic) every ``SAVE_EVERY`` candidates and at the
end, also on SIGTERM (a device time limit): a partial file says ``"complete": false``. ``--limit N``
records the first N candidates only (hero first): a dry run of the whole path.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SAVE_EVERY = 20
COMPILE_TIMEOUT_S = 600.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="gemm", choices=["gemm"])
    ap.add_argument("--m", type=int, required=True)
    ap.add_argument("--n", type=int)
    ap.add_argument("--k", type=int)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--variant", required=True, help="e.g. cuda-wgmma.gemm, cuda-mma-sync.gemm, cpu-avx512.gemm")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--limit", type=int, help="record only the first N candidates (a dry run)")
    ap.add_argument("--space", help="a `tracea tune --space` TOML file applied to the space")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="parallel compile workers")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per candidate's measurement")
    ap.add_argument("--seed", type=int, default=0, help="the inputs' random values")
    return ap.parse_args(argv)


def setup(args: argparse.Namespace) -> dict[str, Any]:
    """The op, the variant, the backend's module and the space, as `tracea tune --variant` builds them."""
    from tracea.doctor import probe
    from tracea.doctor.errors import BadInputError
    from tracea.emitters import registry
    from tracea.kernels import Gemm
    from tracea.kernels.dtypes import parse_dtype
    from tracea.tuner.space import build_space

    for name in ("m", "n", "k", "limit", "jobs", "repeats"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise BadInputError(f"--{name} must be at least 1, got {value}")
    backend = args.variant.split("-", 1)[0]
    if backend not in registry.BACKENDS:
        raise BadInputError(f"--variant {args.variant!r}: no backend {backend!r}; known: {', '.join(registry.BACKENDS)}")
    variants = [v for v in registry.all_variants(backend) if v.id == args.variant]
    if not variants:
        known = ", ".join(v.id for v in registry.all_variants(backend) if v.id.endswith("." + args.op))
        raise BadInputError(f"--variant: no {backend} variant {args.variant!r}; known: {known}")
    host = probe()
    op = Gemm(args.m, args.n or args.m, args.k or args.m, parse_dtype(args.dtype))
    module = registry.BACKENDS[backend]
    space = build_space(op, variants[0], host, registry.backend(backend), args.space)
    if args.limit:
        space = space[: args.limit]
    return {"host": host, "op": op, "variant": args.variant, "backend": backend, "module": module,
            "schedules": [s.to_json() for s in space], "names": [s.name for s in space]}


def device_name(host: Any, backend: str) -> str:
    if backend == "cuda":
        gpus = [d.name for d in host.nvidia.devices if getattr(d, "name", None)]
        if gpus:
            return gpus[0]
    return f"{host.cpu.model} ({host.cpu.logical_cores} logical cores)"


def compile_all(ctx: dict[str, Any], base: dict[str, Any], jobs: int) -> dict[int, dict[str, Any]]:
    """Build every candidate with ``jobs`` workers at once; index -> the worker's answer (``status`` ok,
    or the failure's Measurement JSON)."""
    from tracea.tuner.worker import Worker, WorkerDied, WorkerTimeout

    host_json = ctx["host"].to_json()
    local = threading.local()
    workers: list[Any] = []
    lock = threading.Lock()
    done: dict[int, dict[str, Any]] = {}
    n, t0 = len(ctx["schedules"]), time.monotonic()

    def build(i: int) -> None:
        if not hasattr(local, "worker"):
            local.worker = Worker(host_json)
            with lock:
                workers.append(local.worker)
        try:
            res = local.worker.request({**base, "kind": "compile", "schedule": ctx["schedules"][i]}, COMPILE_TIMEOUT_S)
        except WorkerTimeout:
            res = {"status": "timeout", "error": f"no build within {COMPILE_TIMEOUT_S:g} s"}
        except WorkerDied as exc:
            res = {"status": "compile_failed", "error": f"{exc.text} (phase {exc.phase})"}
        with lock:
            done[i] = res
            if len(done) % max(1, n // 20) == 0 or len(done) == n:
                bad = sum(r.get("status") != "ok" for r in done.values())
                print(f"compiled {len(done)}/{n} ({bad} failed), {time.monotonic() - t0:.0f} s", file=sys.stderr,
                      flush=True)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, n))) as pool:
            list(pool.map(build, range(n)))
    finally:
        for w in workers:
            w.close()
    return done


def trial_of(schedule: dict[str, Any], m: Any, compile_s: float | None) -> dict[str, Any]:
    return {"schedule": schedule, "status": m.status, "p50_ms": m.p50_ms, "p95_ms": m.p95_ms, "rel_err": m.rel_err,
            "error": m.error, "compile_s": compile_s if compile_s is not None else m.compile_s}


def measure_all(ctx: dict[str, Any], built: dict[int, dict[str, Any]], ev: Any, trials: list[dict[str, Any]],
                save: Any) -> None:
    """Each candidate in order, one at a time, appended to ``trials`` (failed builds recorded as they
    failed); ``save(trials)`` every SAVE_EVERY candidates."""
    from tracea.tuner.trial import Measurement

    n, t0 = len(ctx["schedules"]), time.monotonic()
    best: float | None = None
    for i, sched in enumerate(ctx["schedules"]):
        b = built.get(i, {"status": "ok"})
        if b.get("status") != "ok":
            m = Measurement.from_json(b) if "status" in b else Measurement("compile_failed", error=str(b))
        else:
            m = ev.evaluate(sched, index=i)
        trials.append(trial_of(sched, m, b.get("compile_s")))
        if m.status == "ok" and m.p50_ms is not None and (best is None or m.p50_ms < best):
            best = m.p50_ms
        left = (time.monotonic() - t0) / (i + 1) * (n - i - 1)
        what = f"{m.p50_ms:.4f} ms" if m.status == "ok" else f"{m.status}: {(m.error or '')[:80]}"
        print(f"[{i + 1}/{n}] {ctx['names'][i]}: {what} (best {best if best is None else f'{best:.4f}'} ms, "
              f"about {left:.0f} s left)", file=sys.stderr, flush=True)
        if (i + 1) % SAVE_EVERY == 0:
            save(trials)


def record(args: argparse.Namespace) -> Any:
    """Record the space into ``args.out``; returns the RecordedSpace written last."""
    from tracea.tuner.config import Evaluation
    from tracea.tuner.evaluate import LiveEvaluator
    from tracea.tuner.recorded import RecordedSpace, write_recorded
    from tracea.tuner.trial import now_iso

    started = time.monotonic()
    ctx = setup(args)
    n = len(ctx["schedules"])
    print(f"{ctx['variant']} {ctx['op'].signature}: {n} candidates, {args.jobs} compile workers", file=sys.stderr)
    evaluation = Evaluation(warmup=args.warmup, repeats=args.repeats, timeout_s=args.timeout, compile_ahead=False)
    ev = LiveEvaluator(ctx["op"], ctx["variant"], ctx["module"], ctx["host"], evaluation, seed=args.seed)
    command = " ".join(["python benchmarks/gpu/record_space.py", *sys.argv[1:]])
    state: dict[str, Any] = {"trials": [], "baseline": None}

    def save(trials: list[dict[str, Any]], final: bool = False) -> RecordedSpace:
        rec = RecordedSpace(op=ctx["op"].to_json(), variant=ctx["variant"], backend=ctx["backend"],
                            device=device_name(ctx["host"], ctx["backend"]), trials=list(trials), recorded=now_iso(),
                            command=f"{command} ({time.monotonic() - started:.0f} s)", baseline=state["baseline"],
                            complete=final and len(trials) == n and not args.limit)
        if trials:
            write_recorded(rec, args.out)
        return rec

    def on_term(*_: object) -> None:
        raise SystemExit(124)

    previous = signal.signal(signal.SIGTERM, on_term)  # a time limit still leaves the trials so far
    try:
        built = compile_all(ctx, ev.base, args.jobs)
        measure_all(ctx, built, ev, state["trials"], save)
        base = ev.baseline()
        state["baseline"] = base if base and base.get("p50_ms") else None
        rec = save(state["trials"], final=True)
    except BaseException:
        save(state["trials"])
        raise
    finally:
        ev.close()
        signal.signal(signal.SIGTERM, previous)
    ok = [t for t in rec.trials if t["status"] == "ok"]
    print(f"wrote {args.out}: {len(rec.trials)} of {n} candidates, {len(ok)} ok, optimum {rec.optimum_ms} ms, "
          f"hero {rec.trials[0]['status']} {rec.trials[0]['p50_ms']} ms; {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    return rec


def main(argv: list[str] | None = None) -> int:
    from tracea.doctor.errors import TraceaError

    args = parse_args(argv)
    try:
        record(args)
    except TraceaError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
