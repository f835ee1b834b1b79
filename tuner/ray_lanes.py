"""A suite's lanes on a Ray cluster (issue 20): one long-lived actor per lane (a GPU each, or a share of a
node's cores), each taking one problem after another (``RayPool.on_lane`` binds it to a problem's
evaluator), and the cluster's kinds of machine found before any problem starts.

A kind of machine is a backend fingerprint (emitters/registry.py) of a node's host report, as a process on
that node sees it by default (``Member.node_report``: Ray's CUDA_VISIBLE_DEVICES unset). A cluster of H100
and H200 nodes has two kinds; the suite tunes every problem once per kind, each on that kind's lanes, and
each result is stored under its own kind's fingerprint (planned with that kind's host report), which is
what `tracea bench` and `tracea.ops` on such a node look up. The head process still writes the database.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any

from tracea.doctor.cores import cpu_sets
from tracea.doctor.errors import BadInputError

from .pool import Member, import_ray

START_S = 300.0  # placing the actors and probing each node (a doctor probe per node)
_RUNS = itertools.count()


@dataclass
class Lane:
    """One lane's actor and where it runs; ``kind``: its node's fingerprint for the backend."""

    index: int
    ray: Any
    cls: Any
    opts: dict[str, Any]
    namespace: str
    actor: Any
    node: str
    cpus: list[int] = field(default_factory=list)
    kind: str = ""

    def ensure(self) -> None:
        """A new actor where the last one died while idle."""
        if self.actor is None:
            self.respawn()

    def respawn(self) -> None:
        """This lane's actor (if any) killed and a new one placed by Ray; it keeps the lane's cores on the same
        node, and runs unpinned on another."""
        if self.actor is not None:
            try:
                self.ray.kill(self.actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actor = self.cls.options(name=f"tracea-lane-{self.index}-{next(_RUNS)}", **self.opts).remote(None)
        node, _ = self.ray.get(self.actor.where.remote(), timeout=START_S)
        if node != self.node:
            self.cpus, self.node = [], node
        if self.cpus:
            self.ray.get(self.actor.pin.remote(self.cpus), timeout=START_S)


def kinds_of(reports: dict[str, dict[str, Any]], backend: str) -> dict[str, tuple[Any, list[str]]]:
    """{fingerprint: (host report, [node ids])} for nodes' host reports (JSON) as their actors sent them."""
    from tracea.doctor.report import HostReport
    from tracea.emitters.registry import fingerprint

    out: dict[str, tuple[Any, list[str]]] = {}
    for node, report in reports.items():
        host = HostReport.from_json(report)
        fp = fingerprint(host, backend)
        out.setdefault(fp, (host, []))[1].append(node)
    return out


def describe(host: Any, backend: str) -> str:
    """A kind of machine in a few words: its GPUs (for a GPU backend) or its CPU model."""
    from tracea.emitters import registry

    devices = getattr(getattr(host, "nvidia", None), "devices", None) or []
    if registry.backend(backend).MEMBER_RESOURCES.get("num_gpus") and devices:
        names = sorted({d.name for d in devices})
        return f"{len(devices)}x {' + '.join(names)}"
    return str(getattr(host.cpu, "model", "") or "CPU")


class RayLanes:
    """``width`` lane actors of ``backend``'s MEMBER_RESOURCES on the cluster this process is connected to."""

    def __init__(self, width: int, backend: str) -> None:
        from tracea.emitters import registry

        ray = self.ray = import_ray()
        if width < 1:
            raise BadInputError(f"--workers: expected a positive number, got {width}")
        self.namespace = f"tracea-lanes-{os.getpid()}-{next(_RUNS)}"
        opts = {"max_restarts": 0, "namespace": self.namespace, **registry.backend(backend).MEMBER_RESOURCES}
        cls = ray.remote(Member)
        actors = self._actors = [cls.options(name=f"tracea-lane-{k}", **opts).remote(None) for k in range(width)]
        self.lanes: list[Lane] = []
        where = self._get([a.where.remote() for a in actors], f"{width} Ray actors were not placed")
        self.lanes = [Lane(k, ray, cls, opts, self.namespace, a, node) for k, (a, (node, _)) in
                      enumerate(zip(actors, where, strict=True))]
        first: dict[str, int] = {}
        for k, (node, _) in enumerate(where):
            first.setdefault(node, k)
        reports = dict(zip(first, self._get([actors[k].node_report.remote() for k in first.values()],
                                            "the nodes' host reports"), strict=True))
        self.kinds = kinds_of(reports, backend)
        for fp, (_, nodes) in self.kinds.items():
            for lane in self.lanes:
                if lane.node in nodes:
                    lane.kind = fp
        if not registry.backend(backend).MEMBER_RESOURCES.get("num_gpus"):
            self._pin(where)

    def _get(self, refs: Any, what: str) -> Any:
        try:
            return self.ray.get(refs, timeout=START_S)
        except self.ray.exceptions.GetTimeoutError:
            self.close()
            raise BadInputError(f"--cluster: {what} within {START_S:g} s", "`ray status` shows the cluster's "
                                "free CPUs and GPUs; ask for fewer --workers") from None

    def _pin(self, where: list[tuple[str, list[int]]]) -> None:
        """The lanes of each node on disjoint sets of that node's cores."""
        by_node: dict[str, list[Lane]] = {}
        for lane in self.lanes:
            by_node.setdefault(lane.node, []).append(lane)
        for lanes in by_node.values():
            for lane, cores in zip(lanes, cpu_sets(len(lanes), where[lanes[0].index][1]), strict=True):
                lane.cpus = list(cores)
        self._get([ln.actor.pin.remote(ln.cpus) for ln in self.lanes], "pinning")

    def close(self) -> None:
        for actor in [ln.actor for ln in self.lanes] if self.lanes else self._actors:
            if actor is None:
                continue
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass


def cluster_width(backend: str) -> int:
    """The default number of lanes on the connected cluster: its GPUs for a GPU backend, else its nodes."""
    from tracea.emitters import registry

    ray = import_ray()
    if registry.backend(backend).MEMBER_RESOURCES.get("num_gpus"):
        return max(1, int(ray.cluster_resources().get("GPU", 0)))
    return max(1, sum(1 for n in ray.nodes() if n.get("Alive")))
