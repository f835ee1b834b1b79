"""The one cost function every strategy shares: ``evaluate(schedule_json) -> Measurement``.

``LiveEvaluator`` measures in a worker process (tuner/worker.py) with a deadline per candidate, and
compiles upcoming candidates ahead in a second worker. The compile worker is stopped (SIGSTOP to its
process group, compiler included) while a candidate is being timed, so timings are not disturbed, and
continued when the timing is done. ``SimulatedEvaluator`` answers from a recorded complete space.
"""

from __future__ import annotations

import json
import signal
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .config import Evaluation
from .recorded import RecordedSpace, schedule_key
from .trial import Measurement
from .worker import Worker, WorkerDied, WorkerTimeout

PhaseCallback = Callable[[str], None]
AHEAD = 2  # candidates compiled ahead at most


class LiveEvaluator:
    simulated = False

    def __init__(self, op: Any, variant_id: str, module: str, host: Any, evaluation: Evaluation | None = None,
                 *, seed: int = 0, dump_ir: str | None = None, worker_env: dict[str, str] | None = None) -> None:
        # seed: the inputs' random values; dump_ir: the folder the worker writes each candidate's stages to;
        # worker_env: added to the workers' environment (a pool member's cores or GPU, tuner/pool.py)
        ev = evaluation or Evaluation()
        # gate: the worker waits before timing until the phase callback for "run" returned (a dashboard
        # that shares the cores pauses its rendering there; tuner/worker.py)
        self.base = {"op": op.to_json(), "variant": variant_id, "module": module, "seed": seed,
                     "warmup": ev.warmup, "repeats": ev.repeats, "min_seconds": ev.min_seconds, "dump_ir": dump_ir,
                     "gate": ev.quiet_timing}
        self.timeout_s = ev.timeout_s
        host_json = host.to_json()
        self.worker = Worker(host_json, worker_env)
        self.compiler = Worker(host_json, worker_env) if ev.compile_ahead else None
        self.pending: deque[str] = deque()  # keys sent to the compile worker, answered in order
        self.compiled: set[str] = set()
        self.failed: dict[str, Measurement] = {}  # key -> the build failure the compile worker met

    def prefetch(self, schedules: list[dict[str, Any]]) -> None:
        """Queue builds of candidates the strategy expects to ask for next (results fill the cache)."""
        if self.compiler is None:
            return
        self._collect()
        for s in schedules:
            key = schedule_key(s)
            if key in self.pending or key in self.compiled or len(self.pending) >= AHEAD:
                continue
            try:
                self.compiler.send({**self.base, "kind": "compile", "schedule": s})
            except (OSError, WorkerDied, WorkerTimeout):
                self.compiler.kill()
                self.pending.clear()
                return
            self.pending.append(key)

    def _collect(self, until: str | None = None) -> None:
        """Take the compile worker's finished answers; with ``until``, wait (up to the candidate timeout)
        until that key's build is done, so the measuring worker finds it in the cache."""
        assert self.compiler is not None
        deadline = time.monotonic() + (self.timeout_s if until else 0.0)
        while self.pending and (until is None or until in self.pending):
            try:
                msg = self.compiler._read_line(deadline, "compile", kill_on_timeout=False)
            except WorkerTimeout:
                return
            except WorkerDied:
                self.pending.clear()
                return
            if "result" not in msg:
                continue
            key = self.pending.popleft()
            res = msg["result"]
            if res.get("status") in ("compile_failed", "invalid"):
                self.failed[key] = Measurement.from_json(res)
            else:
                self.compiled.add(key)

    def evaluate(self, schedule: dict[str, Any], on_phase: PhaseCallback | None = None, index: int = 0) -> Measurement:
        def phase(p: str) -> None:
            if self.compiler is not None:
                self.compiler.signal_group(signal.SIGSTOP if p == "run" else signal.SIGCONT)
            if on_phase:
                on_phase(p)

        key = schedule_key(schedule)
        if self.compiler is not None and key in self.pending:
            if on_phase:
                on_phase("compile")
            self._collect(until=key)
        if key in self.failed:  # the same build failed in the compile worker: not built twice
            return self.failed.pop(key)
        try:
            res = self.worker.request({**self.base, "kind": "measure", "schedule": schedule, "index": index},
                                      self.timeout_s, phase)
            m = Measurement.from_json(res)
            if m.status == "runtime_failed":
                # the worker answered, but a kernel that faulted may have left its state broken (a CUDA
                # context is unusable after an illegal address or a trap): the next candidate gets a fresh one
                self.worker.kill()
            return m
        except WorkerTimeout as exc:
            return Measurement("timeout", error=f"no answer within {self.timeout_s:g} s (phase {exc.phase}); "
                                                "the worker was killed")
        except WorkerDied as exc:
            status = "compile_failed" if exc.phase == "compile" else "runtime_failed"
            return Measurement(status, error=f"{exc.text} (phase {exc.phase})")
        finally:
            if self.compiler is not None:
                self.compiler.signal_group(signal.SIGCONT)

    def _quiet_request(self, req: dict[str, Any], on_phase: PhaseCallback | None) -> dict[str, Any]:
        """A request that times the baseline: the compile-ahead worker (and its compiler) stopped meanwhile,
        as for a candidate's timing, so the vendor library never shares the cores with a build."""
        if self.compiler is not None:
            self.compiler.signal_group(signal.SIGSTOP)
        try:
            return self.worker.request(req, max(self.timeout_s, 120), on_phase)
        finally:
            if self.compiler is not None:
                self.compiler.signal_group(signal.SIGCONT)

    def baseline(self, on_phase: PhaseCallback | None = None) -> dict[str, Any] | None:
        """The vendor library on the same inputs, verified and timed once per run."""
        try:
            return self._quiet_request({**self.base, "kind": "baseline"}, on_phase)
        except (WorkerTimeout, WorkerDied) as exc:
            return {"name": None, "reason": str(exc)}

    def final(self, schedule: dict[str, Any], on_phase: PhaseCallback | None = None) -> dict[str, Any] | None:
        """The baseline timed interleaved with ``schedule`` (the best), for a ratio under equal conditions."""
        try:
            res = self._quiet_request({**self.base, "kind": "final", "schedule": schedule}, on_phase)
        except (WorkerTimeout, WorkerDied) as exc:
            return {"name": None, "reason": str(exc)}
        return None if "error" in res else res

    def close(self) -> None:
        self.worker.close()
        if self.compiler is not None:
            self.compiler.close()


class SimulatedEvaluator:
    """Replays a recorded complete space: no kernel runs; each answer costs ``delay_s`` (0 by default)."""

    simulated = True

    def __init__(self, recorded: RecordedSpace, delay_s: float = 0.0) -> None:
        self.recorded = recorded
        self.delay_s = delay_s

    def prefetch(self, schedules: list[dict[str, Any]]) -> None:
        pass

    def evaluate(self, schedule: dict[str, Any], on_phase: PhaseCallback | None = None, index: int = 0) -> Measurement:
        m = self.recorded.lookup(schedule)
        for p in ("compile", "verify", "run"):
            if on_phase:
                on_phase(p)
            if self.delay_s:
                time.sleep(self.delay_s / 3)
        if m is None:
            return Measurement("invalid", error="not in the recorded space " + json.dumps(schedule, sort_keys=True))
        return m

    def baseline(self, on_phase: PhaseCallback | None = None) -> dict[str, Any] | None:
        return self.recorded.baseline

    def close(self) -> None:
        pass
