"""Candidates evaluated concurrently (issue 20): a pool of members, each the tuner's own evaluator (an
isolated worker process that compiles, verifies and times; crashes, hangs and wrong results come back as
measurements), one per GPU or per set of CPU cores.

``LocalPool``: the members live in this process, each on a thread of its own, with its own worker process
in the environment its backend gives it (``tuning_members``: its cores, ``TRACEA_WORKER_CPUS``, or its GPU,
``CUDA_VISIBLE_DEVICES``). ``RayPool``: each member
is a Ray actor, on this machine or on any node of a cluster (``ray start --head``; ``--cluster ADDRESS``).
Both answer ``submit`` / ``wait`` / ``baseline`` / ``final`` / ``close``. A member that is lost (its actor
died, its thread raised) returns its candidate as lost and is replaced; the search re-queues it once.
The head process alone writes the tuning database: members only send measurements back.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracea.doctor.errors import NoSpaceError, UnsupportedError

from .trial import Measurement

Factory = Callable[..., Any]  # factory(worker_env=dict | None) -> an evaluator (tuner/evaluate.py)
WAIT_S = 1.0  # how often a waiting search looks up (pause, stop) while candidates are in flight


@dataclass
class Done:
    """A finished candidate: its measurement, or ``lost`` (the member went away with it) and why."""

    index: int
    measurement: Measurement | None
    seconds: float
    member: int
    lost: str | None = None
    fatal: BaseException | None = None  # an error that is no candidate's (a full disk): the search raises it


def member_envs(backend: str, n: int, host: Any) -> list[dict[str, str]]:
    """Each local member's worker environment, as its backend divides ``host`` (``tuning_members``)."""
    from tracea.emitters import registry

    return registry.backend(backend).tuning_members(host, n)


class LocalPool:
    """``len(factories)`` members in this process; ``factories[i]()`` makes member i's evaluator (its worker
    starts at its first request, in the member's environment)."""

    def __init__(self, factories: list[Callable[[], Any]]) -> None:
        self.size = len(factories)
        self._factories = factories
        self._members: list[Any] = [None] * self.size
        self._jobs: list[queue.Queue[tuple[int, dict[str, Any], Any] | None]] = [queue.Queue() for _ in factories]
        self._done: queue.Queue[Done] = queue.Queue()
        self._busy: set[int] = set()
        self._threads = [threading.Thread(target=self._serve, args=(i,), daemon=True, name=f"tracea-member-{i}")
                         for i in range(self.size)]
        for t in self._threads:
            t.start()

    def _member(self, i: int) -> Any:
        if self._members[i] is None:
            self._members[i] = self._factories[i]()
        return self._members[i]

    def _serve(self, i: int) -> None:
        while True:
            job = self._jobs[i].get()
            if job is None:
                return
            index, schedule, on_phase = job
            t0 = time.monotonic()
            try:
                m = self._member(i).evaluate(schedule, on_phase=on_phase, index=index)
                self._done.put(Done(index, m, time.monotonic() - t0, i))
            except KeyboardInterrupt:  # a stop signal: the main thread has it and says so; this member ends quietly
                return
            except NoSpaceError as exc:  # the disk's fault, not the member's: the search stops with it
                self._done.put(Done(index, None, time.monotonic() - t0, i, fatal=exc))
            except Exception as exc:  # noqa: BLE001 - the member, not the candidate, failed: it is replaced
                self._drop(i)
                self._done.put(Done(index, None, time.monotonic() - t0, i, lost=f"{type(exc).__name__}: {exc}"))

    def _drop(self, i: int) -> None:
        member, self._members[i] = self._members[i], None
        if member is not None:
            try:
                member.close()
            except Exception:  # noqa: BLE001 - it is being thrown away
                pass

    @property
    def idle(self) -> int:
        return self.size - len(self._busy)

    def submit(self, index: int, schedule: dict[str, Any], on_phase: Callable[[int, str], None] | None = None) -> int:
        """Start ``schedule`` on an idle member (the caller keeps at most ``size`` in flight); its number.
        ``on_phase(member, phase)`` hears the worker's phases (compile, verify, run), from the member's thread."""
        i = next(j for j in range(self.size) if j not in self._busy)
        self._busy.add(i)
        self._jobs[i].put((index, schedule, None if on_phase is None else (lambda p, i=i: on_phase(i, p))))
        return i

    def wait(self, timeout: float = WAIT_S) -> list[Done]:
        """The candidates finished so far, waiting up to ``timeout`` for the first."""
        out: list[Done] = []
        try:
            out.append(self._done.get(timeout=timeout))
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            pass
        for d in out:
            self._busy.discard(d.member)
        return out

    def _idle_member(self) -> Any:
        if self._busy:
            raise RuntimeError("the baseline is timed only while no candidate is in flight")
        return self._member(0)

    def baseline(self, on_phase: Any = None) -> dict[str, Any] | None:
        return self._idle_member().baseline(on_phase)

    def final(self, schedule: dict[str, Any], on_phase: Any = None) -> dict[str, Any] | None:
        return self._idle_member().final(schedule, on_phase)

    def prefetch(self, schedules: list[dict[str, Any]]) -> None:
        pass

    def close(self) -> None:
        for q in self._jobs:
            q.put(None)
        for t in self._threads:
            t.join(timeout=5)
        for i in range(self.size):
            self._drop(i)


class Member:
    """A Ray actor's body: one evaluator, its worker pinned (CPU) once the head knows where the actor runs.
    Ray gives a GPU actor its own ``CUDA_VISIBLE_DEVICES``, which the worker inherits."""

    def __init__(self, factory: Factory) -> None:
        self.factory = factory
        self.ev: Any = None
        self.env: dict[str, str] | None = None

    def where(self) -> tuple[str, list[int]]:
        """(this actor's node, the cores this process may use)."""
        import ray

        return ray.get_runtime_context().get_node_id(), sorted(os.sched_getaffinity(0))

    def environment(self, backend: str) -> dict[str, Any]:
        """What this actor's results depend on (``registry.environment`` of its node, as it sees it)."""
        from tracea.doctor import probe
        from tracea.emitters import registry

        return registry.environment(probe(), backend)

    def node_report(self) -> dict[str, Any]:
        """This node's host report as a process on it sees it by default (CUDA_VISIBLE_DEVICES and its kin
        unset, where Ray set them for this actor): the machine a user there tunes and benches on, whose
        fingerprint its results are stored under. Probed in a child process: this one keeps Ray's view."""
        import json
        import subprocess
        import sys

        hidden = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
        env = {k: v for k, v in os.environ.items() if k not in hidden}
        code = "import json; from tracea.doctor import probe; print(json.dumps(probe().to_json()))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                             check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def pin(self, cpus: list[int]) -> None:
        self.env = {"TRACEA_WORKER_CPUS": ",".join(map(str, cpus))} if cpus else None

    def bind(self, factory: Factory) -> None:
        """Evaluate another problem from now on (a suite's lane actor takes one problem after another)."""
        self.release()
        self.factory = factory

    def release(self) -> None:
        """The current problem's evaluator (its worker processes) closed; the actor stays."""
        if self.ev is not None:
            ev, self.ev = self.ev, None
            ev.close()

    def _ev(self) -> Any:
        if self.ev is None:
            self.ev = self.factory(worker_env=self.env)
        return self.ev

    def evaluate(self, schedule: dict[str, Any], index: int) -> dict[str, Any]:
        return self._ev().evaluate(schedule, index=index).to_json()

    def baseline(self) -> dict[str, Any] | None:
        return self._ev().baseline()

    def final(self, schedule: dict[str, Any]) -> dict[str, Any] | None:
        return self._ev().final(schedule)

    def close(self) -> None:
        self.release()


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UnsupportedError("--cluster: Ray is not installed", "pip install 'tracea[cluster]' (Ray), or leave "
                               "--cluster out: --workers alone runs local worker processes") from None
    return ray
