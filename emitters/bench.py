"""``tracea bench``: one Tracea kernel against its baseline, in the same process, verified first.

1. The decision engine picks the variant (precision fallback included); the schedule is the tuned one
   when the tuning database has it, else the hero schedule.
2. Fresh random inputs (never zeros; the seed is recorded) and a float64 reference.
3. The first run happens in a forked child: a kernel that crashes or hangs there is a recorded
   ``runtime_failed`` / ``timeout``, not the end of Tracea. A wrong answer is ``wrong_result`` and is
   never timed.
4. Tracea and the baseline are timed in alternating blocks after warm-up (``HOST_BLOCK`` samples of one,
   a pause, then of the other: neither side's spinning idle threads land in the other's samples):
   median and p95; the ratio is baseline time / Tracea time (> 1: Tracea is faster). Where each side's
   spread is too wide for that, the rounds of every attempt so far (a block of each side, milliseconds
   apart) may still settle the ratio: their 95 % interval, narrow and holding the ratio of the pooled
   medians (stability.paired_verdict); attempts go on while more rounds may narrow it (measure_stable's
   ``extend``), and a ratio so settled reports the medians of every attempt's samples.
"""

from __future__ import annotations

import datetime as _dt
import faulthandler
import json
import math
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracea.doctor.errors import CompileError, LaunchError, ToolchainMissingError
from tracea.doctor.plan import Decision, plan
from tracea.doctor.report import HostReport
from tracea.kernels import Op, relative_error, tolerance
from tracea.kernels.dtypes import poison, to_float64
from tracea.kernels.footprint import require_host_memory

from . import registry
from .baselines import pinned_note
from .nvtx import phase as nvtx_phase
from .stability import interval_text, measure_stable, paired_verdict, pairing_may_settle, spread_problem
from .timing import Timing, interleaved, min_time_s, pooled

# Host timing in alternating blocks: samples per turn, and the pause before a turn (libgomp's idle
# workers, torch's, spin up to a few milliseconds after a call before they sleep)
HOST_BLOCK = 5
HOST_GAP_S = 0.02


@dataclass(frozen=True)
class BenchResult:
    op: Op
    decision: Decision
    status: str  # a MetricsRow status
    seed: int
    variant: str | None = None
    schedule: dict[str, Any] | None = None
    schedule_source: str | None = None  # "tuned" | "hero"
    error: str | None = None
    rel_err: float | None = None
    tolerance: float | None = None
    tracea: Timing | None = None
    baseline_name: str | None = None
    baseline: Timing | None = None
    baseline_rel_err: float | None = None
    baseline_reason: str | None = None
    compile_s: float | None = None
    cache_hit: bool | None = None
    unstable: str | None = None  # why the timings do not make a ratio (emitters/stability.py), or None
    # (low, high, rounds, ratio): the ratio settled by pairing (stability.paired_verdict)
    ratio_interval: tuple[float, float, int, float] | None = None
    baseline_note: str | None = None  # why the baseline is not the library's best here (a pinned BLAS), or None
    copy_gbps: float | None = None  # the device's copy bandwidth measured in the same run (copy_bandwidth.py)
    copy_method: str | None = None  # how it was measured, or why it was not
    memory_bound: bool | None = None  # the op's FLOPs a byte under the device's ridge point (None: unknown)
    fingerprint: str = ""
    timestamp: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    @property
    def tflops(self) -> float | None:
        return self.op.flops / (self.tracea.p50_ms * 1e-3) / 1e12 if self.tracea else None  # type: ignore[attr-defined]

    @property
    def gbps(self) -> float | None:
        return self.op.bytes / (self.tracea.p50_ms * 1e-3) / 1e9 if self.tracea else None  # type: ignore[attr-defined]

    @property
    def of_copy(self) -> float | None:
        """The kernel's bytes a second over the copy bandwidth measured in the same run, or None."""
        return self.gbps / self.copy_gbps if self.copy_gbps and self.gbps is not None else None

    @property
    def ratio(self) -> float | None:
        """Baseline time / Tracea time: the ratio of the two medians where they agree with themselves, or the
        ratio a settled pairing gives (``ratio_interval``'s last member: the medians' ratio, or the rounds' median
        where the medians' lies just outside the interval); None when unstable."""
        if self.tracea and self.baseline and not self.unstable and not self.baseline_wrong:
            return self.ratio_interval[3] if self.ratio_interval else self.baseline.p50_ms / self.tracea.p50_ms
        return None

    @property
    def baseline_wrong(self) -> str | None:
        """Why the baseline's time makes no ratio because its output is not the op's (off the reference by more
        than a tenth and ten times Tracea's bound: another function, such as a library ignoring an argument), or
        None."""
        e = self.baseline_rel_err
        if e is None or e <= max(0.1, 10 * (self.tolerance or 0.0)):
            return None
        return f"the baseline's output is off the reference by {e:.2g}: it computes something else (no ratio)"

    @property
    def paired_note(self) -> str | None:
        """How a ratio settled by pairing was settled (``ratio_interval``), or None."""
        if not self.ratio_interval or self.ratio is None:
            return None
        lo, hi, n, _ratio = self.ratio_interval
        note = (f"each side's timings spread wide (a noisy machine); {n} paired rounds put the ratio at "
                f"{lo:.2f}-{hi:.2f} (95 %)")
        medians = self.baseline.p50_ms / self.tracea.p50_ms  # type: ignore[union-attr]
        if not lo <= medians <= hi:
            note += (f", the ratio printed is their median; the two medians' ratio, {medians:.2f}, lies outside "
                     "(both sides' times moved while they were measured)")
        return note

    @property
    def note(self) -> str | None:
        """What a reader of the ratio must know: why there is none, how pairing settled it, or why it flatters
        Tracea."""
        return "; ".join(n for n in (self.unstable, self.baseline_wrong, self.paired_note, self.baseline_note)
                         if n) or None

    def row_fields(self) -> dict[str, Any]:
        """The metrics row's fields (reports/metrics.py ``bench_row`` makes the row: reports sits above
        the emitters)."""
        shape = {k: v for k, v in self.op.to_json().items() if k not in ("op", "schema_version", "dtype")}
        return dict(
            timestamp=self.timestamp, op=self.op.kind, shape=json.dumps(shape, sort_keys=True),
            dtype=self.op.dtype.value, backend=self.decision.backend or "", variant=self.variant or "",  # type: ignore[attr-defined]
            schedule=json.dumps(self.schedule, sort_keys=True) if self.schedule else "", status=self.status,
            p50_ms=self.tracea.p50_ms if self.tracea else None, p95_ms=self.tracea.p95_ms if self.tracea else None,
            tflops=self.tflops, gbps=self.gbps, rel_err=self.rel_err, baseline=self.baseline_name,
            baseline_p50_ms=self.baseline.p50_ms if self.baseline else None, ratio=self.ratio,
            env_fingerprint=self.fingerprint, note=self.note,
        )


def _rel_err_no_blas(out: np.ndarray, ref: np.ndarray) -> float:
    """relative_error without BLAS calls: safe in a forked child of a process running OpenBLAS threads."""
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape or not np.all(np.isfinite(out)):
        return math.inf
    d = out - ref
    den = math.sqrt(float(np.sum(ref * ref)))
    return math.sqrt(float(np.sum(d * d))) / (den if den > 0 else 1.0)


def run_isolated(fn: Callable[[], float], timeout_s: float,
                 what: str = "the kernel") -> tuple[str, float | None, str | None]:
    """Run ``fn`` (which returns a number) in a forked child: (status, value, error text naming ``what``).
    status: "ok", "runtime_failed" (an exception, a signal, or an exit before it answered) or "timeout"."""
    if not hasattr(os, "fork"):
        try:
            return "ok", fn(), None
        except Exception as exc:  # noqa: BLE001
            return "runtime_failed", None, f"{type(exc).__name__}: {exc}"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        os.close(r)
        # A crash here is the answer (its signal, below), not a fault of the caller's process: no
        # faulthandler traceback of the child in the caller's log.
        faulthandler.disable()
        try:
            msg = {"value": fn()}
        except BaseException as exc:  # noqa: BLE001
            msg = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(w, json.dumps(msg).encode())
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + timeout_s
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.005)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        return "timeout", None, f"{what} did not finish within {timeout_s:.0f} s"
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return "runtime_failed", None, f"{what} crashed with {signal.Signals(sig).name}"
    try:
        msg = json.loads(data or b"{}")
    except ValueError:
        msg = {}
    if "value" in msg:
        return "ok", float(msg["value"]), None
    return "runtime_failed", None, msg.get("error", f"{what} ended its process (exit status {os.WEXITSTATUS(status)}) "
                                                    "before it answered")


def bench(op: Op, host: HostReport, backend: str = "cpu", precision: str | None = None, repeats: int = 10,
          warmup: int = 2, min_seconds: float | None = None, seed: int | None = None, timeout_s: float = 120.0,
          tuned: Callable[[Op, str], dict[str, Any] | None] | None = None, variant: str | None = None,
          build: Callable[..., Any] | None = None) -> BenchResult:
    """Plan, build, verify and time ``op``. ``tuned(op, variant_id)`` may return a stored schedule.
    ``variant`` pins the variant (the planner still checks this host can run it); ``build(op, variant,
    schedule, host)`` replaces the backend's build (replay compiles a bundled source; the CLI keeps the
    kernel's artifact for the IR dump). ``min_seconds``: the least time each contender is timed on a host
    (None: ``timing.min_time_s()``, ``$TRACEA_MIN_TIME`` or 0.5 s)."""
    min_seconds = min_time_s() if min_seconds is None else min_seconds
    variants = [registry.variant(variant)] if variant else registry.all_variants(backend)
    decision = plan(op, host, variants, precision=precision, backend=backend)
    variant_id = decision.require()
    op = decision.planned_op(op)
    require_host_memory(op)  # an op this machine cannot hold is one clear error, before anything is built
    seed = secrets.randbits(32) if seed is None else seed
    fp = registry.fingerprint(host, backend)
    base = {"op": op, "decision": decision, "seed": seed, "variant": variant_id, "fingerprint": fp}

    b = registry.backend(backend)
    chosen = registry.variant(variant_id)
    stored = tuned(op, variant_id) if tuned else None
    schedule = b.schedule_from_json(stored) if stored else b.hero_schedule(op, chosen, host)
    base |= {"schedule": schedule.to_json(), "schedule_source": "tuned" if stored else "hero"}
    try:
        with nvtx_phase("host", "compile"):
            kernel = (build or b.build)(op, chosen, schedule, host)
    except ToolchainMissingError:
        raise
    except CompileError as exc:
        return BenchResult(status="compile_failed", error=exc.message, **base)
    except LaunchError as exc:  # a binary that cannot be loaded (or, from a bundle, crashed while loading)
        return BenchResult(status="runtime_failed", error=exc.message, **base)
    art = kernel.artifact
    base |= {"compile_s": getattr(art, "compile_seconds", None), "cache_hit": getattr(art, "cache_hit", None)}

    rng = np.random.default_rng(seed)
    inputs = op.random_inputs(rng)
    ref = op.reference(inputs)
    tol = tolerance(op)
    if b.ON_DEVICE:  # verified in-process (no fork under a device context), timed with device events

        def device_spread(f: dict[str, Any]) -> str | None:
            named = {"Tracea": f.get("tracea"), f.get("baseline_name") or "baseline": f.get("baseline")}
            return spread_problem({k: v for k, v in named.items() if v}) if f.get("status") == "ok" else None

        with nvtx_phase(op.phase, "time"):
            fields, unstable = measure_stable(
                lambda: b.bench_on_device(kernel, op, inputs, ref, tol, warmup, repeats), device_spread)
        return BenchResult(tolerance=tol, unstable=unstable, **fields, **base)
    timing = {"repeats": repeats, "warmup": warmup, "min_seconds": min_seconds, "timeout_s": timeout_s}
    return _bench_on_host(b, kernel, op, host, inputs, ref, tol, timing, base)


def _time_pair(contenders: dict[str, Callable[[], object]], baseline_name: str, timing: dict[str, Any]
               ) -> tuple[dict[str, Timing], str | None, tuple[float, float, int, float] | None]:
    """Tracea and its baseline timed in alternating blocks, attempts pooled while pairing may settle the ratio:
    (timings to report, why unstable or None, the settled pairing's interval or None)."""
    names = {"tracea": "Tracea", "baseline": baseline_name}
    settled: dict[str, Any] = {}
    rounds: list[dict[str, float]] = []  # every attempt's paired rounds: each is a sample of the ratio
    samples: dict[str, list[float]] = {}  # every attempt's samples: the times a settled pairing reports

    def measure() -> dict[str, Timing]:
        return interleaved(contenders, warmup=timing["warmup"], repeats=timing["repeats"],
                           min_seconds=timing["min_seconds"], block=HOST_BLOCK, gap_s=HOST_GAP_S,
                           rounds_out=rounds, samples_out=samples)

    def problem(t: dict[str, Timing]) -> str | None:  # without a baseline: the spread alone
        settled["interval"], settled["timings"] = None, t
        why_now = spread_problem({names.get(k, k): v for k, v in t.items()})
        if why_now is None or "baseline" not in t:  # this measurement agrees with itself (or has no pair)
            return why_now
        every = pooled(samples)  # the pairing pools every attempt, its times too; only its interval settles
        why, settled["interval"] = paired_verdict(every, rounds, "baseline", "tracea", names, need_pairing=True)
        if why is None:
            settled["timings"] = every
            return None
        return why_now + interval_text(rounds, "baseline", "tracea")  # the attempt it reports, and the rounds

    last, unstable = measure_stable(
        measure, problem,
        extend=(lambda: pairing_may_settle(rounds, "baseline", "tracea")) if "baseline" in contenders else None)
    timings = last if unstable else settled.get("timings", last)
    return timings, unstable, None if unstable else settled.get("interval")


def _bench_on_host(b: Any, kernel: Any, op: Op, host: HostReport, inputs: dict[str, Any], ref: np.ndarray,
                   tol: float, timing: dict[str, Any], base: dict[str, Any]) -> BenchResult:
    """Verify ``kernel`` in a forked child, then again in this process, then time it in alternating
    blocks with the backend's host baseline."""
    out = np.empty(op.output_shape(), op.output_dtype.storage)  # type: ignore[attr-defined]

    def first_run() -> float:
        out.fill(poison(out.dtype))  # every element must be written
        kernel(inputs, out)
        return _rel_err_no_blas(to_float64(out, op.output_dtype), ref)  # type: ignore[attr-defined]

    with nvtx_phase("host", "verify"):
        status, err, text = run_isolated(first_run, timing["timeout_s"])
    if status != "ok":
        return BenchResult(status=status, error=text, tolerance=tol, **base)
    if not err <= tol:  # NaN and inf fail too
        return BenchResult(status="wrong_result", rel_err=err, tolerance=tol,
                           error=f"relative error {err:.3g} exceeds {tol:.1g}", **base)

    baseline = b.baseline_for(op, inputs)
    contenders: dict[str, Callable[[], object]] = {"tracea": lambda: kernel(inputs, out)}
    if baseline.run is not None:
        contenders["baseline"] = baseline.run
    with nvtx_phase("host", "verify"):
        kernel(inputs, out)  # the same check in this process, on the buffers that will be timed
        err = relative_error(to_float64(out, op.output_dtype), ref)  # type: ignore[attr-defined]
    if not err <= tol:
        return BenchResult(status="wrong_result", rel_err=err, tolerance=tol,
                           error=f"relative error {err:.3g} exceeds {tol:.1g} (in-process run)", **base)
    base_err = relative_error(np.asarray(baseline.run(), dtype=np.float64), ref) if baseline.run else None
    with nvtx_phase(op.phase, "time"):
        timings, unstable, interval = _time_pair(contenders, baseline.name, timing)
    return BenchResult(
        status="ok", rel_err=err, tolerance=tol, tracea=timings["tracea"], baseline_name=baseline.name,
        baseline=timings.get("baseline"), baseline_rel_err=base_err, baseline_reason=baseline.reason,
        unstable=unstable, ratio_interval=interval,
        baseline_note=pinned_note(host) if baseline.run is not None else None, **base,
    )
