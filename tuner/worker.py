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

The child's answer to each request is in tuner/worker_requests.py; this module holds its loop (``main``)
and the parent's side (``Worker``, ``kill_all``).
"""

from __future__ import annotations

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

from .worker_requests import _one_line, _Session

PHASES = ("start", "compile", "verify", "run")


# ----------------------------------------------------------------------------------------- the child


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
