"""Evaluation in a separate process: ``python -m tracea.tuner.worker`` reads one JSON request per line on
stdin and answers on stdout: progress lines ``{"phase": "compile" | "verify" | "run"}``, then one
``{"result": {...}}``. The parent (``Worker``) enforces a deadline; a kernel that segfaults kills only
this process, one that hangs is killed with its process group, and either becomes a recorded status.

Spawned, never forked: CUDA state does not survive fork, and a fresh interpreter carries nothing of the
tuner's threads. The worker keeps the inputs and the float64 reference of its op between requests.

Requests: ``{"kind": "init", "host": HostReport JSON}``, then ``measure`` (build, verify, time),
``compile`` (build only: fills the content-hash cache ahead of time), ``baseline`` (the vendor library,
verified and timed like a candidate) or ``final`` (the best candidate and the baseline timed interleaved).

A request with ``"gate": true`` stops before it times anything: the worker sends ``{"phase": "run"}`` and
waits for a ``go`` line, so the parent can first quiet whatever shares the cores (the dashboard pauses its
rendering) and the timing runs in a quiet window.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .trial import Measurement

PHASES = ("start", "compile", "verify", "run")


# ----------------------------------------------------------------------------------------- the child


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
        plug-in or test backend), else the host libraries of emitters/baselines.py."""
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
            self.data[key] = (inputs, op.reference(inputs), np.empty(op.output_shape(), op.dtype.storage))
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
        from tracea.emitters.nvtx import phase, phase_of
        from tracea.emitters.timing import interleaved
        from tracea.kernels import relative_error, tolerance
        from tracea.kernels.dtypes import to_float64

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
            out.fill(float("nan") if out.dtype.kind == "f" else 0x7FC0)  # poison: every element must be written
            with phase("host", "verify"):
                kernel(inputs, out)
                err = relative_error(to_float64(out, op.dtype), ref)
        except Exception as exc:  # noqa: BLE001 - a launch failure is a result of this candidate
            return Measurement("runtime_failed", error=_one_line(f"{type(exc).__name__}: {exc}"),
                               compile_s=compile_s, cache_hit=hit)
        tol = tolerance(op)
        if not err <= tol:  # NaN fails too
            return Measurement("wrong_result", rel_err=_finite(err), compile_s=compile_s, cache_hit=hit,
                               error=f"relative error {err:.3g} exceeds {tol:.1g}")
        self.timing_starts(req)
        warmup, repeats = int(req.get("warmup", 2)), int(req.get("repeats", 10))
        try:
            with phase(phase_of(op.kind), "time"):
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
        from tracea.kernels.dtypes import to_float64

        kernel, failed, _ = self.build(req)
        if failed is not None:
            return {"error": failed.error}
        op = kernel.op if hasattr(kernel, "op") else self.resolve(req)[0]
        inputs, ref, out = self.op_data(op, int(req.get("seed", 0)))
        out.fill(float("nan") if out.dtype.kind == "f" else 0x7FC0)
        kernel(inputs, out)
        err = relative_error(to_float64(out, op.dtype), ref)
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
        """Why a host baseline runs below its library's best here (emitters/baselines.py), or None."""
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


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the tuner that started it dies (even by SIGKILL), so a hung
    candidate never outlives its tuner spinning a core."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


def _fatal(exc: Exception) -> dict[str, Any] | None:
    """The answer for an error that is no candidate's fault and must stop the tune (a full disk), else
    None: the parent raises it again (``Worker._read_line``) instead of recording a failed trial."""
    from tracea.doctor.errors import NoSpaceError
    from tracea.doctor.files import is_no_space, no_space

    if is_no_space(exc):
        exc = no_space(getattr(exc, "filename", None) or ".", "the worker could not write a file")
    if isinstance(exc, NoSpaceError):
        return {"fatal": "no_space", "error": exc.message, "hint": exc.hint}
    return None


def _pin() -> None:
    """TRACEA_WORKER_CPUS ("0,1"): this worker (and the compiler and kernel threads it starts) on those
    cores only, so that pool members on one machine time on disjoint cores (tuner/pool.py)."""
    cpus = os.environ.get("TRACEA_WORKER_CPUS")
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def main() -> None:
    _die_with_parent()
    _pin()
    # the protocol owns the real stdout; anything a library or kernel prints goes to stderr
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    session = _Session(proto)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = session.handle(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - answer, so the parent records it and goes on
            result = _fatal(exc) or {"status": "runtime_failed", "error": _one_line(f"{type(exc).__name__}: {exc}")}
        session.send({"result": result})


# ---------------------------------------------------------------------------------------- the parent


_LIVE: weakref.WeakSet[Worker] = weakref.WeakSet()  # every started worker of this process
_KILLED = threading.Event()  # set by kill_all(): a worker's death from now on is the interruption's


def kill_all() -> None:
    """SIGKILL every worker of this process and its process group, now (the CLI's SIGTERM/SIGHUP/SIGINT
    handler calls it, so no kernel keeps a core busy after the tuner was told to stop). Safe inside a
    signal handler: it only sends signals. A tuner thread still reading from a killed worker gets a
    KeyboardInterrupt, not a "worker died" result: the death is not the candidate's."""
    _KILLED.set()
    try:
        workers = list(_LIVE)
    except RuntimeError:  # the set changed under the handler: take what a second look finds
        workers = list(_LIVE)
    for w in workers:
        proc = w.proc
        if proc is not None and proc.returncode is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def kill_all_done() -> None:
    """The interruption is over (the CLI returned): workers started from now on live normally."""
    _KILLED.clear()


class WorkerDied(Exception):
    def __init__(self, text: str, phase: str) -> None:
        super().__init__(text)
        self.text, self.phase = text, phase


class WorkerTimeout(Exception):
    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


class Worker:
    """One ``tracea.tuner.worker`` process, restarted after a crash or a timeout."""

    def __init__(self, host_json: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.host_json = host_json
        self.env = env or {}  # added to worker_env(): TRACEA_WORKER_CPUS, CUDA_VISIBLE_DEVICES (tuner/pool.py)
        self.proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._stderr: Any = None
        self.outstanding = 0  # requests sent and not answered yet

    def start(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracea.tuner.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, start_new_session=True, env={**worker_env(), **self.env})  # its own process group: a hang is killed whole
        self._buf = b""
        self.outstanding = 0
        _LIVE.add(self)
        if _KILLED.is_set():  # started after the stop signal: it goes the same way
            kill_all()
        self.request({"kind": "init", "host": self.host_json}, timeout_s=120)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send(self, req: dict[str, Any]) -> None:
        if not self.alive:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        self.outstanding += 1

    def request(self, req: dict[str, Any], timeout_s: float,
                on_phase: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Send ``req`` and wait for its result; raises WorkerDied or WorkerTimeout (the process is gone)."""
        self.send(req)
        deadline = time.monotonic() + timeout_s
        phase = "start"
        while True:
            msg = self._read_line(deadline, phase)
            if "phase" in msg:
                phase = msg["phase"]
                if on_phase:
                    on_phase(phase)  # with a gate, this returns once the parent's side is quiet
                if phase == "run" and req.get("gate"):
                    self._go()
            elif "result" in msg:
                return msg["result"]

    def _go(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
        except OSError:  # it died meanwhile: the next read says how
            pass

    def _read_line(self, deadline: float, phase: str, kill_on_timeout: bool = True) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 and not _readable(fd, 0):
                if kill_on_timeout:
                    self.kill()
                raise WorkerTimeout(phase)
            if not _readable(fd, max(0.0, min(left, 0.5))):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if _KILLED.is_set():
                    self.proc.wait()
                    raise KeyboardInterrupt(f"the worker was stopped by a signal (phase {phase})")
                raise WorkerDied(self._death(), phase)
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        msg = json.loads(line)
        if "result" in msg:
            self.outstanding -= 1
            if isinstance(msg["result"], dict) and msg["result"].get("fatal") == "no_space":
                from tracea.doctor.errors import NoSpaceError

                raise NoSpaceError(msg["result"]["error"], msg["result"].get("hint"))
        return msg

    def _death(self) -> str:
        assert self.proc is not None
        code = self.proc.wait()
        if code < 0:
            text = f"the worker died with {signal.Signals(-code).name}"
        else:
            text = f"the worker exited with status {code}"
        tail = self.stderr_tail()
        return text + (f": {tail}" if tail else "")

    def stderr_tail(self, limit: int = 300) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace").strip()
        return " ".join(text[-limit:].split())

    def signal_group(self, sig: int) -> None:
        """Signal the worker and its children (a compile in progress): SIGSTOP/SIGCONT pause it."""
        if self.alive:
            assert self.proc is not None
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.proc is None:
            return
        self.signal_group(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Let an idle worker exit on its own; kill one still working (an interrupted run, or builds
        compiled ahead that nobody will ask for: the cache's writes are atomic, nothing is left half)."""
        if self.alive and self.outstanding > 0:
            self.kill()
        if self.alive:
            assert self.proc is not None and self.proc.stdin is not None
            self.signal_group(signal.SIGCONT)
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self.proc = None


def worker_env() -> dict[str, str]:
    """The worker's environment: OpenBLAS told not to spin for 0.1 s after each call (the float64
    reference and the baseline use it), so its idle threads do not steal a core from the candidate timed
    next. Read once when NumPy loads, hence set here, before the worker starts."""
    env = dict(os.environ)
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", "12")
    return env


def _readable(fd: int, timeout: float) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        return bool(sel.select(timeout))


if __name__ == "__main__":
    main()
