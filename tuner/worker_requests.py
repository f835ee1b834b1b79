"""The worker process's answer to each request (the loop that reads them is ``main`` in tuner/worker.py,
whose docstring gives the protocol): ``_Session`` keeps the host and, per op, the inputs, the float64
reference and the output buffer between requests, and answers ``init``, ``measure`` (build, verify,
time), ``compile``, ``baseline`` (the vendor library) and ``final`` (the best and the baseline interleaved).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from typing import Any

from .trial import Measurement


class _Session:
    """The worker's state: the host, and per op the inputs, reference and output buffer."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.host: Any = None
        self.data: dict[tuple[str, int], tuple[Any, Any, Any]] = {}

    def send(self, msg: dict[str, Any]) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def timing_starts(self, req: dict[str, Any]) -> None:
        """Say that timing starts; with a gate, wait until the parent says go (see the module docstring)."""
        self.send({"phase": "run"})
        if req.get("gate"):
            sys.stdin.readline()

    def baseline_of(self, req: dict[str, Any], op: Any, inputs: Any) -> Any:
        """The vendor library for ``op``: the backend module's own ``baseline_for`` when it has one (a
        plug-in or test backend), else the host libraries of emitters/baselines/ (each op's file)."""
        mod = importlib.import_module(req["module"])
        fn = getattr(mod, "baseline_for", None)
        if fn is None:
            from tracea.emitters.baselines import baseline_for as fn
        return fn(op, inputs)

    def op_data(self, op: Any, seed: int) -> tuple[Any, Any, Any]:
        import numpy as np

        from tracea.kernels.footprint import require_host_memory

        key = (op.signature, seed)
        if key not in self.data:
            self.data.clear()
            require_host_memory(op)  # "needs N GiB, has M": the trial's error, not a bare MemoryError
            inputs = op.random_inputs(np.random.default_rng(seed))  # fresh random values, never zeros
            self.data[key] = (inputs, op.reference(inputs), np.empty(op.output_shape(), op.output_dtype.storage))
        return self.data[key]

    def resolve(self, req: dict[str, Any]) -> tuple[Any, Any, Any]:
        from tracea.kernels import Op

        op = Op.from_json(req["op"])
        mod = importlib.import_module(req["module"])
        variant = next((v for v in mod.VARIANTS if v.id == req["variant"]), None)
        if variant is None:
            variant = mod.resolve(req["variant"])
        return op, mod, variant

    def build(self, req: dict[str, Any]) -> tuple[Any, Measurement | None, float]:
        from tracea.doctor.errors import (
            BadInputError,
            CompileError,
            NoSpaceError,
            TraceaError,
            UnsupportedError,
        )

        op, mod, variant = self.resolve(req)
        t0 = time.perf_counter()
        try:
            schedule = mod.schedule_from_json(req["schedule"])
            kernel = mod.build(op, variant, schedule, self.host)
        except NoSpaceError:  # the disk's fault, not the candidate's: the tune stops (main() answers "fatal")
            raise
        except CompileError as exc:
            return None, Measurement("compile_failed", error=_one_line(exc.message),
                                     compile_s=time.perf_counter() - t0), 0.0
        except (BadInputError, UnsupportedError) as exc:
            return None, Measurement("invalid", error=_one_line(exc.message)), 0.0
        except TraceaError as exc:
            return None, Measurement("compile_failed", error=_one_line(exc.message)), 0.0
        art = getattr(kernel, "artifact", None)
        seconds = getattr(art, "compile_seconds", None)
        return kernel, None, float(seconds if seconds is not None else time.perf_counter() - t0)

    def measure(self, req: dict[str, Any]) -> Measurement:
        from tracea.emitters.nvtx import phase
        from tracea.emitters.timing import interleaved
        from tracea.kernels import relative_error, tolerance
        from tracea.kernels.dtypes import poison, to_float64

        self.send({"phase": "compile"})
        with phase("host", "compile"):  # NVTX ranges (emitters/nvtx.py): Nsight Systems follows the worker
            kernel, failed, compile_s = self.build(req)
        if failed is not None:
            return failed
        hit = getattr(getattr(kernel, "artifact", None), "cache_hit", None)
        op = kernel.op if hasattr(kernel, "op") else self.resolve(req)[0]
        if req.get("dump_ir"):
            _dump(req, op, kernel)
        inputs, ref, out = self.op_data(op, int(req.get("seed", 0)))
        self.send({"phase": "verify"})
        try:
            out.fill(poison(out.dtype))  # every element must be written
            with phase("host", "verify"):
                kernel(inputs, out)
                err = relative_error(to_float64(out, op.output_dtype), ref)
        except Exception as exc:  # noqa: BLE001 - a launch failure is a result of this candidate
            return Measurement("runtime_failed", error=_one_line(f"{type(exc).__name__}: {exc}"),
                               compile_s=compile_s, cache_hit=hit)
        tol = tolerance(op)
        if not err <= tol:  # NaN fails too
            return Measurement("wrong_result", rel_err=_finite(err), compile_s=compile_s, cache_hit=hit,
                               error=f"relative error {err:.3g} exceeds {tol:.1g}")
        if (side := op.side_problem(inputs)) is not None:  # what the kernel writes beside C (an FP8 C's amax)
            return Measurement("wrong_result", rel_err=_finite(err), compile_s=compile_s, cache_hit=hit, error=side)
        self.timing_starts(req)
        warmup, repeats = int(req.get("warmup", 2)), int(req.get("repeats", 10))
        try:
            with phase(op.phase, "time"):
                if hasattr(kernel, "time"):  # a device kernel times itself (CUDA events, L2 flushed)
                    t = kernel.time(inputs, warmup, repeats, flush_l2=True)
                else:
                    t = interleaved({"k": lambda: kernel(inputs, out)}, warmup=warmup, repeats=repeats,
                                    min_seconds=float(req.get("min_seconds", 0.1)))["k"]
        except Exception as exc:  # noqa: BLE001
            return Measurement("runtime_failed", error=_one_line(f"{type(exc).__name__}: {exc}"),
                               compile_s=compile_s, cache_hit=hit)
        return Measurement("ok", p50_ms=t.p50_ms, p95_ms=t.p95_ms, min_ms=t.min_ms, runs=t.runs, rel_err=err,
                           compile_s=compile_s, cache_hit=hit)

    def baseline(self, req: dict[str, Any]) -> dict[str, Any]:
        """The vendor library alone, verified, then timed until its samples agree (emitters/stability.py);
        samples that never agree give no time at all, only the reason, so no ratio can be made from them."""
        import numpy as np

        from tracea.emitters.stability import measure_stable, spread_problem
        from tracea.emitters.timing import interleaved
        from tracea.kernels import relative_error

        op = self.resolve(req)[0]
        inputs, ref, _ = self.op_data(op, int(req.get("seed", 0)))
        if _on_device(req):
            self.timing_starts(req)
            return _device_baseline(op, inputs, ref, req)
        b = self.baseline_of(req, op, inputs)
        if b.run is None:
            return {"name": b.name, "reason": b.reason}
        err = relative_error(np.asarray(b.run(), dtype=np.float64), ref)
        self.timing_starts(req)
        t, unstable = measure_stable(
            lambda: interleaved({"b": b.run}, warmup=int(req.get("warmup", 2)), repeats=int(req.get("repeats", 10)),
                                min_seconds=float(req.get("min_seconds", 0.1)))["b"],
            lambda t: spread_problem({b.name: t}))
        if unstable:
            return {"name": b.name, "reason": f"the baseline's timing was {unstable}", "unstable": True,
                    "rel_err": err}
        return {"name": b.name, "p50_ms": t.p50_ms, "p95_ms": t.p95_ms, "rel_err": err, "note": self.pinned()}

    def final(self, req: dict[str, Any]) -> dict[str, Any]:
        """The best candidate and the baseline timed interleaved (as ``tracea bench`` does), so the ratio
        compares the two under the same conditions; the candidate is verified again first."""
        import numpy as np

        from tracea.emitters.timing import interleaved
        from tracea.kernels import relative_error, tolerance
        from tracea.kernels.dtypes import poison, to_float64

        kernel, failed, _ = self.build(req)
        if failed is not None:
            return {"error": failed.error}
        op = kernel.op if hasattr(kernel, "op") else self.resolve(req)[0]
        inputs, ref, out = self.op_data(op, int(req.get("seed", 0)))
        out.fill(poison(out.dtype))
        kernel(inputs, out)
        err = relative_error(to_float64(out, op.output_dtype), ref)
        if not err <= tolerance(op):
            return {"error": f"the best candidate failed verification again (relative error {err:.3g})"}
        if _on_device(req):  # the vendor library on the same GPU, each side timed with CUDA events
            self.timing_starts(req)
            return _device_baseline(op, inputs, ref, req, kernel)
        b = self.baseline_of(req, op, inputs)
        if b.run is None:
            return {"name": b.name, "reason": b.reason}
        base_err = relative_error(np.asarray(b.run(), dtype=np.float64), ref)
        self.timing_starts(req)
        t = interleaved({"k": lambda: kernel(inputs, out), "b": b.run}, warmup=int(req.get("warmup", 2)),
                        repeats=int(req.get("repeats", 10)), min_seconds=max(0.3, float(req.get("min_seconds", 0.1))))
        return {"name": b.name, "p50_ms": t["b"].p50_ms, "p95_ms": t["b"].p95_ms, "rel_err": base_err,
                "tracea_p50_ms": t["k"].p50_ms, "tracea_p95_ms": t["k"].p95_ms, "interleaved": True,
                "note": self.pinned()}

    def pinned(self) -> str | None:
        """Why a host baseline runs below its library's best here (emitters/baselines/), or None."""
        from tracea.emitters.baselines import pinned_note

        return pinned_note(self.host) if self.host is not None else None

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        kind = req.get("kind")
        if kind == "init":
            from tracea.doctor.report import HostReport

            self.host = HostReport.from_json(req["host"])
            return {"ready": True}
        if kind == "measure":
            return self.measure(req).to_json()
        if kind == "compile":
            _, failed, seconds = self.build(req)
            return failed.to_json() if failed else {"status": "ok", "compile_s": seconds}
        if kind == "baseline":
            return self.baseline(req)
        if kind == "final":
            return self.final(req)
        raise ValueError(f"unknown request {kind!r}")


def _on_device(req: dict[str, Any]) -> bool:
    """An accelerator backend (its ``ON_DEVICE``): its baseline is the vendor library on the device (the
    backend's ``vendor_on_device``), not NumPy on the host."""
    return bool(importlib.import_module(req["module"]).ON_DEVICE)


def _device_baseline(op: Any, inputs: Any, ref: Any, req: dict[str, Any], kernel: Any = None) -> dict[str, Any]:
    """The vendor library on the device, through the backend's ``vendor_on_device`` (emitters/backend.py):
    verified, then timed with device events and the L2 flushed, as ``tracea bench`` does; with ``kernel``,
    the two timed in alternating rounds so a change of clocks hits both."""
    backend = importlib.import_module(req["module"])
    return backend.vendor_on_device(op, inputs, ref, int(req.get("warmup", 2)), int(req.get("repeats", 10)), kernel)


def _dump(req: dict[str, Any], op: Any, kernel: Any) -> None:
    """--dump-ir: every stage of this candidate's kernel (reports/irdump.py), numbered by its index."""
    from tracea.reports.irdump import dump_kernel

    try:
        dump_kernel(req["dump_ir"], op, None, req["schedule"], getattr(kernel, "artifact", None),
                    index=int(req.get("index", 0)))
    except Exception as exc:  # noqa: BLE001 - a dump that cannot be written does not fail the candidate
        print(f"dump-ir: {exc}", file=sys.stderr)


def _one_line(text: str, limit: int = 2000) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finite(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None
