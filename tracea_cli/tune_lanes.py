"""A suite's problems tuned side by side: one lane a worker (a GPU, or a share of the cores), each lane the
serial search of one problem at a time on its member (``Evaluation.lane``), taking the next problem when its
own is done. The head process runs every lane on a thread of its own; each problem's run writes the tuning
database through its own connection (SQLite in WAL mode serialises the writes), so nothing is lost when
lanes finish together.

Problems are taken largest first (longest-processing-time order: their FLOPs), which keeps the run from
ending on one large problem while the other workers idle. Ctrl-C stops every lane: the candidates in
flight finish and are stored, each run closes as stopped, and the problems not started are left out.

On Ray (``run_ray_lanes``) each lane is a long-lived actor of tuner/ray_lanes.py, and each kind of machine in
the cluster has its own queue: a problem is tuned once per kind, on that kind's lanes, planned with that
kind's host report and stored under its fingerprint.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Job:
    """A problem of the suite, configured: its place in the suite (problem, kind of machine), label, op and
    TuneConfig; on Ray, the fingerprint of the kind of machine it is for and that kind in words."""

    index: tuple[int, int]
    label: str
    op: Any
    config: Any
    kind: str = ""
    machine: str = ""


def error_row(label: str, op: Any, message: str) -> dict[str, Any]:
    """A problem's row of the table when it has no verified best: why."""
    return {"problem": label, "op": op.signature, "best": None, "error": message}


def _size(op: Any) -> float:
    try:
        return float(op.flops)
    except (AttributeError, TypeError, ValueError):
        return 0.0


class _Lanes:
    """``slots``: (lane number, kind, Ray lane or None for a local member); ``hosts``: each kind's host."""

    def __init__(self, jobs: list[Job], slots: list[tuple[int, str, Any]], hosts: dict[str, Any], quiet: bool,
                 row: Callable[[str, Any, Any], dict[str, Any]], share: int = 1) -> None:
        from tracea.tuner.run import Control

        self.hosts, self.quiet, self.row, self.slots, self.share = hosts, quiet, row, slots, share
        self.queues: dict[str, queue.Queue[Job]] = {kind: queue.Queue() for kind in hosts}
        for job in sorted(jobs, key=lambda j: -_size(j.op)):
            self.queues[job.kind].put(job)
        self.rows: dict[tuple[int, int], dict[str, Any]] = {}
        self.controls = [Control() for _ in slots]
        self.failures: list[BaseException] = []
        self.console, self.progress = _progress(quiet)
        self.tasks = [self.progress.add_task(f"lane {k}: waiting", total=None) for k, _, _ in slots]

    def lane(self, at: int) -> None:
        from tracea.doctor.errors import TraceaError
        from tracea.tuner.run import tune

        k, kind, ray_lane = self.slots[at]
        while not self.controls[at].stopped:
            try:
                job = self.queues[kind].get_nowait()
            except queue.Empty:
                return
            config = dataclasses.replace(job.config, evaluation=dataclasses.replace(
                job.config.evaluation, lane=k, lane_members=self.share if ray_lane is None else 1))
            try:
                r = tune(job.op, self.hosts[kind], config, on_event=self._events(at, job),
                         control=self.controls[at], lane=ray_lane)
                row = self.row(job.label, job.op, r)
            except TraceaError as exc:
                row = error_row(job.label, job.op, exc.message)
            except BaseException as exc:  # noqa: BLE001 - a defect: raised again once every lane has stopped
                self.failures.append(exc)
                for c in self.controls:
                    c.stop()
                return
            self.rows[job.index] = {**row, "lane": k, **({"machine": job.machine, "fingerprint": kind} if kind else {})}
            self._finished(k, self.rows[job.index])

    def _events(self, at: int, job: Job) -> Callable[[str, dict[str, Any]], None]:
        from rich.markup import escape

        k = self.slots[at][0]
        name = escape(job.label + (f" on {job.machine}" if job.machine else ""))

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "start":
                self.progress.reset(self.tasks[at], total=data["budget"], description=f"lane {k}: {name} starting")
            elif kind == "phase":
                self.progress.update(self.tasks[at], description=f"lane {k}: {name} {data['phase']:8s} "
                                                                 f"{escape(str(data['name']))}")
            elif kind == "trial":
                self.progress.update(self.tasks[at], completed=data["done"])
        return on_event

    def _finished(self, k: int, row: dict[str, Any]) -> None:
        if self.quiet:
            return
        from rich.markup import escape

        what = (f"best {escape(str(row['best']))} {row['best_ms']:.4f} ms" if row.get("best") else
                f"no verified best: {escape(str(row.get('error') or row.get('stop') or ''))}")
        where = f" on {escape(row['machine'])}" if row.get("machine") else ""
        self.console.print(f"lane {k}: {escape(row['problem'])} {escape(row['op'])}{where}: {what}")

    def run(self) -> dict[tuple[int, int], dict[str, Any]]:
        threads = [threading.Thread(target=self.lane, args=(at,), daemon=True, name=f"tracea-lane-{k}")
                   for at, (k, _, _) in enumerate(self.slots)]
        t0 = time.monotonic()
        with self.progress:
            for t in threads:
                t.start()
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.5)
            except KeyboardInterrupt:
                self.console.print("stopping every lane: the candidates in flight finish and are stored")
                for c in self.controls:
                    c.stop()
                for t in threads:
                    t.join()
                raise
        if self.failures:
            raise self.failures[0]
        if not self.quiet:
            self.console.print(f"{len(self.rows)} problems in {time.monotonic() - t0:.1f} s on {len(self.slots)} workers")
        return self.rows


def _progress(quiet: bool) -> tuple[Any, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .render import make_console

    console = make_console(stderr=True)
    return console, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=console, disable=quiet or not console.is_terminal,
                             transient=True)


def run_lanes(jobs: list[Job], width: int, host: Any, quiet: bool,
              row: Callable[[str, Any, Any], dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    """Each job's row (by its index), the jobs tuned ``width`` at a time on this host's members; with more
    members than jobs, each lane owns ``width // jobs`` of them and runs its problem over them."""
    slots = [(k, "", None) for k in range(min(width, len(jobs)))]
    return _Lanes(jobs, slots, {"": host}, quiet, row, share=width // len(slots)).run()


def run_ray_lanes(jobs: list[Job], lanes: Any, quiet: bool,
                  row: Callable[[str, Any, Any], dict[str, Any]]) -> dict[tuple[int, int], dict[str, Any]]:
    """Each job's row, every job on a lane of its kind of machine (``lanes``: tuner/ray_lanes.RayLanes)."""
    kinds = {j.kind for j in jobs}
    slots = [(ln.index, ln.kind, ln) for ln in lanes.lanes if ln.kind in kinds]
    return _Lanes(jobs, slots, {fp: host for fp, (host, _) in lanes.kinds.items() if fp in kinds}, quiet, row).run()
