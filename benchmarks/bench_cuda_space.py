"""The complete recorded search space of a bf16 GEMM on this GPU (``python benchmarks/bench_cuda.py space``):
every candidate compiled first by a pool of processes (which fills the cubin cache), then verified and
timed in a worker process of its own that a sticky CUDA error ends without ending the run (the parent
records the candidate and starts a new worker past it), every trial written to one JSON file as it goes.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from bench_cuda_reference import HOST, reference

from tracea.emitters import cuda
from tracea.kernels import Gemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64


def _space_worker(op_json: dict, variant: str, scheds: list[dict], start: int, results: Path, ref_path: Path,
                  inputs_path: Path) -> None:
    from tracea.kernels import Op

    op = Op.from_json(op_json)
    data = np.load(inputs_path)
    inputs = {k: data[k] for k in data.files}
    ref = np.load(ref_path)
    for i in range(start, len(scheds)):
        sched = cuda.CudaSchedule.from_json(scheds[i])
        rec = {"index": i, "schedule": scheds[i], "status": "ok", "p50_ms": None, "p95_ms": None,
               "rel_err": None, "error": None}
        with results.open("a") as f:
            f.write(json.dumps({"index": i, "started": True}) + "\n")
        try:
            try:
                k = cuda.build(op, variant, sched, HOST)
            except Exception as exc:  # noqa: BLE001
                rec.update(status="compile_failed" if "NVRTC" in str(exc) else "invalid", error=str(exc)[:300])
                raise StopIteration from None
            y = k(inputs)
            err = relative_error(to_float64(y, op.dtype), ref)
            rec["rel_err"] = err if math.isfinite(err) else None
            if not err <= tolerance(op):
                rec.update(status="wrong_result", error=f"relative error {err:.3g} > {tolerance(op):.3g}")
                raise StopIteration
            t = k.time(inputs, warmup=3, repeats=15)
            rec.update(p50_ms=t.p50_ms, p95_ms=t.p95_ms)
        except StopIteration:
            pass
        except Exception as exc:  # noqa: BLE001
            rec.update(status="runtime_failed", error=f"{type(exc).__name__}: {exc}"[:300])
            with results.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            os._exit(3)  # a sticky CUDA error poisons the context: the parent restarts past it
        with results.open("a") as f:
            f.write(json.dumps(rec) + "\n")


def _precompile(args: tuple) -> None:
    op_json, variant, sched_json = args
    from tracea.kernels import Op

    try:
        from tracea.emitters.cuda.build import compile_kernel

        compile_kernel(Op.from_json(op_json), variant, cuda.CudaSchedule.from_json(sched_json), HOST,
                       os.environ["TRACEA_SPACE_ARCH"])
    except Exception:  # noqa: BLE001 - the worker records the failure
        pass


def space(out: Path, size: int, arch: str, device_name: str | None) -> None:
    import concurrent.futures as cf

    op = Gemm(size, size, size, "bf16")
    variant = "cuda-mma-sync.gemm"
    cands = cuda.search_space(op, variant, HOST, arch)
    scheds = [c.to_json() for c in cands]
    t0 = time.time()
    os.environ["TRACEA_SPACE_ARCH"] = arch
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that has initialised CUDA
    with cf.ProcessPoolExecutor(max_workers=os.cpu_count() or 4, mp_context=ctx) as pool:  # fills the cubin cache
        list(pool.map(_precompile, [(op.to_json(), variant, s) for s in scheds]))
    print(f"{len(scheds)} candidates compiled in {time.time() - t0:.0f} s", flush=True)
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="tracea-space-"))  # inputs and reference: too big to bring back
    rng = np.random.default_rng(7)
    inputs = op.random_inputs(rng)
    np.savez(work / "inputs.npz", **inputs)
    ref, _ = reference(op, inputs)
    np.save(work / "ref.npy", ref)
    results = work / "results.jsonl"
    results.unlink(missing_ok=True)
    start = 0
    spec = [op.to_json(), variant, scheds]
    (work / "spec.json").write_text(json.dumps(spec))
    import signal

    def _stop(*_: object) -> None:
        raise SystemExit(124)

    signal.signal(signal.SIGTERM, _stop)  # a timeout still leaves the trials so far in the file
    try:
        _space_rounds(scheds, start, work, results)
    finally:
        _write_space(out, op, variant, scheds, results, size, device_name)


def _space_rounds(scheds: list[dict], start: int, work: Path, results: Path) -> None:
    while start < len(scheds):
        proc = subprocess.run([sys.executable, __file__, "space-worker", str(work), str(start)], timeout=900)
        done = [json.loads(ln) for ln in results.read_text().splitlines()]
        finished = {d["index"] for d in done if "status" in d}
        started = [d["index"] for d in done if d.get("started")]
        last = max(started) if started else start
        if last not in finished:  # it died inside a candidate without recording it
            with results.open("a") as f:
                f.write(json.dumps({"index": last, "schedule": scheds[last], "status": "runtime_failed",
                                    "p50_ms": None, "p95_ms": None, "rel_err": None,
                                    "error": f"worker exited with {proc.returncode}"}) + "\n")
        start = last + 1


def _write_space(out: Path, op, variant: str, scheds: list[dict], results: Path, size: int,
                 device_name: str | None) -> None:
    lines = results.read_text().splitlines() if results.exists() else []
    recs = {d["index"]: d for d in (json.loads(ln) for ln in lines) if "status" in d}
    trials = [{k: recs[i][k] for k in ("schedule", "status", "p50_ms", "p95_ms", "rel_err", "error")}
              for i in sorted(recs)]
    doc = {"schema_version": 1, "op": op.to_json(), "variant": variant, "backend": "cuda",
           "device": device_name, "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "command": f"python benchmarks/bench_cuda.py space --size {size} --out {out.name}",
           "complete": len(trials) == len(scheds), "trials": trials}
    out.write_text(json.dumps(doc, indent=1))
    ok = [t for t in trials if t["status"] == "ok"]
    best = min(ok, key=lambda t: t["p50_ms"]) if ok else None
    name = cuda.CudaSchedule.from_json(best["schedule"]).name if best else None
    print(f"{len(trials)} of {len(scheds)} trials, {len(ok)} ok; best {name} {best and best['p50_ms']} ms; "
          f"hero {trials[0]['status'] if trials else None} {trials[0]['p50_ms'] if trials else None} ms", flush=True)


def space_worker(work: Path, start: int) -> None:
    """``space``'s worker process: the candidates of ``work``'s spec from ``start`` on."""
    op_json, variant, scheds = json.loads((work / "spec.json").read_text())
    _space_worker(op_json, variant, scheds, start, work / "results.jsonl", work / "ref.npy", work / "inputs.npz")


if __name__ == "__main__":  # space()'s worker: python bench_cuda_space.py space-worker WORK START
    space_worker(Path(sys.argv[2]), int(sys.argv[3]))
