"""The pool of tuner/pool.py on Ray: one actor per member (a GPU each, or a share of a node's cores), on this
machine (``--cluster local`` starts a private Ray instance) or on a running cluster (``--cluster auto`` or an
address from ``ray start --head``). Actors are named ``tracea-member-<i>`` in a namespace of their own run
(``RayPool.namespace``), so that an operator (or a test) can find one.

A member's actor that dies (its node lost, the actor killed) gives its candidate back as lost; a new actor
takes its place on the same cores. Ray is imported here only.
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

from tracea.doctor.cores import cpu_sets
from tracea.doctor.errors import BadInputError

from .pool import WAIT_S, Done, Factory, Member, import_ray
from .trial import Measurement

START_S = 120.0  # how long the actors may take to be placed and answer
_RUNS = itertools.count()


def connect(address: str) -> bool:
    """Ray started (``"local"``: a private instance) or joined (``"auto"``, an address) unless this process
    already runs it; whether this call started it (and so shuts it down)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing reported home unless the user opts in
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    try:
        if address == "local":
            ray.init(address="local", **kwargs)  # never a cluster that RAY_ADDRESS or /tmp/ray names
        else:
            ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise BadInputError(f"--cluster {address}: cannot connect to Ray ({str(exc).splitlines()[0]})",
                            "start one with `ray start --head`, give its address, or use --cluster local") from None
    return True


class RayPool:
    def __init__(self, factory: Factory, n: int, address: str, backend: str | None,
                 head_env: dict[str, Any] | None = None) -> None:
        """``backend``: whose ``MEMBER_RESOURCES`` each actor asks for (None, a replayed space: one CPU);
        ``head_env``: the environment results are stored under, which every actor's must match."""
        ray = self.ray = import_ray()
        self._lane: Any = None  # a suite's lane (on_lane), whose actor outlives this pool
        self._owns = connect(address)
        self.size, self._factory = n, factory
        self.namespace = f"tracea-{os.getpid()}-{next(_RUNS)}"
        opts: dict[str, float] = {"num_cpus": 1}
        if backend is not None:
            from tracea.emitters import registry

            opts = dict(registry.backend(backend).MEMBER_RESOURCES)
        self._pinned = not opts.get("num_gpus")  # a GPU member owns its GPU; CPU members get core sets
        self._cls = ray.remote(Member)
        self._opts = {"max_restarts": 0, "namespace": self.namespace, **opts}
        self._actors = [self._new(i) for i in range(n)]
        self._where: list[tuple[str, list[int]]] = self._get([a.where.remote() for a in self._actors], START_S,
                                                               f"{n} Ray actors were not placed")
        self._cpus: list[list[int]] = [[] for _ in range(n)]
        if backend is not None and head_env is not None:
            self._same_environment(backend, head_env)
        if self._pinned:
            self._pin()
        self._refs: dict[Any, tuple[int, int, float]] = {}  # object ref -> (member, index, start)

    @classmethod
    def on_lane(cls, lane: Any, factory: Factory) -> RayPool:
        """A pool of one over a suite's lane actor (tuner/ray_lanes.py), bound to this problem's evaluator.
        Closing it releases the evaluator, not the actor; an actor that dies is replaced, and the lane keeps
        the replacement for its next problem."""
        self = cls.__new__(cls)
        self.ray, self._owns, self.size, self._factory, self._lane = lane.ray, False, 1, factory, lane
        self.namespace, self._actors, self._refs = lane.namespace, [lane.actor], {}
        self._get(lane.actor.bind.remote(factory), START_S, "a lane actor did not answer")
        return self

    def _new(self, i: int) -> Any:
        return self._cls.options(name=f"tracea-member-{i}", **self._opts).remote(self._factory)

    def _get(self, refs: Any, timeout: float, what: str) -> Any:
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise BadInputError(f"--cluster: {what} within {timeout:g} s", "`ray status` shows the cluster's "
                                "free CPUs and GPUs; ask for fewer --workers") from None

    def _same_environment(self, backend: str, head_env: dict[str, Any]) -> None:
        """Refuse a worker whose node differs from this machine: its times would be stored under this
        machine's fingerprint (a tuning key per kind of machine is not built yet)."""
        from tracea.emitters import registry

        envs = self._get([a.environment.remote(backend) for a in self._actors], START_S, "the workers' environments")
        for i, env in enumerate(envs):
            why = registry.backend(backend).worker_mismatch(head_env, env)
            if why:
                self.close()
                raise BadInputError(f"--cluster: worker {i} (node {self._where[i][0][:12]}) is not this kind of "
                                    f"machine: {why}", "its results would be stored under this machine's "
                                    "fingerprint; run one tune per kind of machine, from a head of that kind")

    def _pin(self) -> None:
        """The members of each node on disjoint sets of that node's cores (one actor's view of them)."""
        by_node: dict[str, list[int]] = {}
        for i, (node, _) in enumerate(self._where):
            by_node.setdefault(node, []).append(i)
        for members in by_node.values():
            sets = cpu_sets(len(members), self._where[members[0]][1])
            for i, cores in zip(members, sets, strict=True):
                self._cpus[i] = list(cores)
        self._get([a.pin.remote(c) for a, c in zip(self._actors, self._cpus, strict=True)], START_S, "pinning")

    @property
    def idle(self) -> int:
        return self.size - len(self._refs)

    def submit(self, index: int, schedule: dict[str, Any], on_phase: Any = None) -> int:
        """As LocalPool.submit; an actor's worker phases stay on its node (``on_phase`` is not called)."""
        busy = {m for m, _, _ in self._refs.values()}
        i = next(j for j in range(self.size) if j not in busy)
        self._refs[self._actors[i].evaluate.remote(schedule, index)] = (i, index, time.monotonic())
        return i

    def wait(self, timeout: float = WAIT_S) -> list[Done]:
        if not self._refs:
            return []
        ready, _ = self.ray.wait(list(self._refs), num_returns=1, timeout=timeout)
        if ready:
            ready, _ = self.ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
        out = []
        for ref in ready:
            i, index, t0 = self._refs.pop(ref)
            try:
                out.append(Done(index, Measurement.from_json(self.ray.get(ref)), time.monotonic() - t0, i))
            except Exception as exc:  # noqa: BLE001 - the actor died or its evaluator raised: the member is lost
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                out.append(Done(index, None, time.monotonic() - t0, i, lost=f"{type(exc).__name__}: {why}"[:300]))
                self._replace(i)
        return out

    def _replace(self, i: int) -> None:
        if self._lane is not None:  # the lane places (and keeps) its new actor
            self._lane.respawn()
            self._actors[i] = self._lane.actor
            self._get(self._lane.actor.bind.remote(self._factory), START_S, "a replacement actor did not answer")
            return
        try:
            self.ray.kill(self._actors[i])
        except Exception:  # noqa: BLE001 - already gone
            pass
        self._actors[i] = self._new(i)
        node, cpus = self._get(self._actors[i].where.remote(), START_S, "a replacement actor was not placed")
        if self._pinned:
            same = node == self._where[i][0] and self._cpus[i]
            self._get(self._actors[i].pin.remote(self._cpus[i] if same else []), START_S, "pinning")
        self._where[i] = (node, cpus)

    def _idle_member(self) -> Any:
        if self._refs:
            raise RuntimeError("the baseline is timed only while no candidate is in flight")
        return self._actors[0]

    def baseline(self, on_phase: Any = None) -> dict[str, Any] | None:
        return self.ray.get(self._idle_member().baseline.remote())

    def final(self, schedule: dict[str, Any], on_phase: Any = None) -> dict[str, Any] | None:
        return self.ray.get(self._idle_member().final.remote(schedule))

    def prefetch(self, schedules: list[dict[str, Any]]) -> None:
        pass

    def close(self) -> None:
        if self._lane is not None:  # the lane's actor stays for its next problem
            try:
                self.ray.get(self._actors[0].release.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - gone: the lane replaces it when it next binds
                self._lane.actor = None
            return
        try:
            self.ray.get([a.close.remote() for a in self._actors], timeout=30)
        except Exception:  # noqa: BLE001 - a member already gone
            pass
        for a in self._actors:
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        if self._owns:
            self.ray.shutdown()
