"""A suite's problems tuned side by side: one lane a worker (a GPU, or a share of the cores), each lane the
serial search of one problem at a time on its member (``Evaluation.lane``), taking the next problem when its
own is done. The head process runs every lane on a thread of its own; each problem's run writes the tuning
database through its own connection (SQLite in WAL mode serialises the writes), so nothing is lost when
lanes finish together.

Problems are taken largest first (longest-processing-time order: their FLOPs), which keeps the run from
ending on one large problem while the other workers idle. Ctrl-C stops every lane: the candidates in
flight finish and are stored, each run closes as stopped, and the problems not started are left out.
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
    """A problem of the suite, configured: its place in the suite, label, op and TuneConfig."""

    index: int
    label: str
    op: Any
    config: Any


def _size(op: Any) -> float:
    try:
        return float(op.flops)
    except (AttributeError, TypeError, ValueError):
        return 0.0


class _Lanes:
    def __init__(self, jobs: list[Job], width: int, host: Any, quiet: bool,
                 row: Callable[[str, Any, Any], dict[str, Any]]) -> None:
        from tracea.tuner.run import Control

        self.host, self.quiet, self.row = host, quiet, row
        self.width = min(width, len(jobs))
        self.todo: queue.Queue[Job] = queue.Queue()
        for job in sorted(jobs, key=lambda j: -_size(j.op)):
            self.todo.put(job)
        self.rows: dict[int, dict[str, Any]] = {}
        self.controls = [Control() for _ in range(self.width)]
        self.failures: list[BaseException] = []
        self.console, self.progress = _progress(quiet)
        self.tasks = [self.progress.add_task(f"lane {k}: waiting", total=None) for k in range(self.width)]

    def lane(self, k: int) -> None:
        from tracea.doctor.errors import TraceaError
        from tracea.tuner.run import tune

        while not self.controls[k].stopped:
            try:
                job = self.todo.get_nowait()
            except queue.Empty:
                return
            config = dataclasses.replace(job.config, evaluation=dataclasses.replace(job.config.evaluation, lane=k))
            try:
                r = tune(job.op, self.host, config, on_event=self._events(k, job), control=self.controls[k])
                row = self.row(job.label, job.op, r)
            except TraceaError as exc:
                row = {"problem": job.label, "op": job.op.signature, "best": None, "error": exc.message}
            except BaseException as exc:  # noqa: BLE001 - a defect: raised again once every lane has stopped
                self.failures.append(exc)
                for c in self.controls:
                    c.stop()
                return
            self.rows[job.index] = {**row, "lane": k}
            self._finished(k, self.rows[job.index])

    def _events(self, k: int, job: Job) -> Callable[[str, dict[str, Any]], None]:
        from rich.markup import escape

        state: dict[str, Any] = {"done": 0, "budget": None}
        name = escape(job.label)

        def on_event(kind: str, data: dict[str, Any]) -> None:
            if kind == "start":
                state["budget"] = data["budget"]
                self.progress.reset(self.tasks[k], total=data["budget"], description=f"lane {k}: {name} starting")
            elif kind == "phase":
                self.progress.update(self.tasks[k], description=f"lane {k}: {name} {data['phase']:8s} "
                                                                f"{escape(str(data['name']))}")
            elif kind == "trial":
                self.progress.update(self.tasks[k], completed=data["done"])
        return on_event

    def _finished(self, k: int, row: dict[str, Any]) -> None:
        if self.quiet:
            return
        from rich.markup import escape

        what = (f"best {escape(str(row['best']))} {row['best_ms']:.4f} ms" if row.get("best") else
                f"no verified best: {escape(str(row.get('error') or row.get('stop') or ''))}")
        self.console.print(f"lane {k}: {escape(row['problem'])} {escape(row['op'])}: {what}")

    def run(self) -> dict[int, dict[str, Any]]:
        threads = [threading.Thread(target=self.lane, args=(k,), daemon=True, name=f"tracea-lane-{k}")
                   for k in range(self.width)]
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
            self.console.print(f"{len(self.rows)} problems in {time.monotonic() - t0:.1f} s on {self.width} workers")
        return self.rows


def _progress(quiet: bool) -> tuple[Any, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    return console, Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=console, disable=quiet or not console.is_terminal,
                             transient=True)


def run_lanes(jobs: list[Job], width: int, host: Any, quiet: bool,
              row: Callable[[str, Any, Any], dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each job's row (by its index in the suite), the jobs tuned ``width`` at a time."""
    return _Lanes(jobs, width, host, quiet, row).run()
