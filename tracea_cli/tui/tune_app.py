"""``tracea tune`` on a terminal: a live dashboard of the search.

Progress and ETA, the candidate being evaluated and its phase (compile, verify, run), a sortable table of
every trial (failures show their reason), best-so-far as a chart, and the best schedule with its TFLOP/s
and ratio to the vendor baseline. Keys: p pause, r resume, x stop early (results are kept), w save,
o sort by the next column, q quit. The search runs in a thread worker that posts messages
(tune_messages.py); it never touches widgets.

The dashboard never draws while something is being timed on cores it shares: before each timing the
worker process waits (tuner/worker.py, "gate") until the app has drawn what it had and gone quiet, and
every update that arrives during the timing is held and shown when it ends. Quiet timing is on when the
kernel runs on the host CPU, or when the machine has fewer than ``QUIET_CORES`` cores (a GPU kernel's
host thread, the dashboard and the timing each need one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.markup import escape
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Label, ProgressBar, Static

from .best_chart import BestChart
from .tune_messages import (
    BaselineMeasured,
    Hush,
    PhaseChanged,
    TrialFinished,
    TuneFailed,
    TuneFinished,
    TuneStarted,
)

QUIET_CORES = 4
HUSH_WAIT_S = 2.0  # the longest a timing waits for the screen to settle


def needs_quiet_timing(config: Any, host: Any = None) -> bool:
    """Whether timings of this run must not share the cores with the dashboard's rendering."""
    if config.target.simulate:
        return False  # nothing is timed
    if config.evaluation.workers != 1 or config.evaluation.cluster is not None:
        return False  # a pool's workers time on their own cores or GPUs, several at once: no one pause fits
    backend = config.target.backend  # None: the planner's choice, timed as a host backend would be
    if backend is None:
        return True
    from tracea.emitters import registry

    return not registry.backend(backend).ON_DEVICE or (os.cpu_count() or 1) < QUIET_CORES


QUIET_WINDOW_S = 0.05
QUIET_SHARE = 0.05  # of one core


def settle_quietly(limit_s: float = HUSH_WAIT_S) -> float:
    """Wait until this process (the dashboard's loop, its driver thread, the search thread) has used less
    than ``QUIET_SHARE`` of a core over ``QUIET_WINDOW_S``: a screen drawn once is not yet an idle app
    (layout, a driver thread, the tail of start-up work). Returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        cpu0, t0 = time.process_time(), time.monotonic()
        time.sleep(QUIET_WINDOW_S)
        if time.process_time() - cpu0 < QUIET_SHARE * (time.monotonic() - t0):
            break
    return time.monotonic() - start


COLUMNS = ("#", "schedule", "status", "p50 ms", "p95 ms", "TFLOP/s", "compile s", "reason")
SORTABLE = ("p50 ms", "status", "schedule", "#")  # "o" cycles; the table starts in trial order


class TuneApp(App[Any]):
    TITLE = "Tracea tune"
    CSS = """
    #top { height: auto; }
    #progress-box { width: 1fr; border: round $primary; padding: 0 1; height: 6; }
    #best { width: 1fr; border: round $success; padding: 0 1; height: 6; }
    #trials { height: 1fr; border: round $primary; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "Pause"),
        Binding("r", "resume", "Resume"),
        Binding("x", "stop", "Stop early"),
        Binding("w", "save", "Save"),
        Binding("o", "sort", "Sort"),
        Binding("q", "quit_tune", "Quit"),
    ]

    def __init__(self, op: Any, host: Any, config: Any, tuner: Callable[..., Any] | None = None,
                 save_dir: str | Path = ".", quiet_timing: bool | None = None) -> None:
        super().__init__()
        from tracea.tuner.run import Control

        self.quiet_timing = needs_quiet_timing(config, host) if quiet_timing is None else quiet_timing
        if self.quiet_timing:
            config = dataclasses.replace(config, evaluation=dataclasses.replace(config.evaluation, quiet_timing=True))
        self.op, self.host, self.config = op, host, config
        self.hush_count = 0  # timings the dashboard stayed quiet for
        self.tuner = tuner
        self.control = Control()
        self.save_dir = Path(save_dir)
        self.trials: list[Any] = []
        self.info: dict[str, Any] = {}
        self.baseline: dict[str, Any] | None = None
        self.result: Any = None
        self.error: str | None = None
        self.best_ms: float | None = None
        self.started = time.monotonic()
        self.sort_key: str | None = None
        self.saved: Path | None = None
        self.lanes: dict[int, list[Any]] = {}  # a pool's worker -> [phase, candidate index, name, trials done]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="top"):
            with Vertical(id="progress-box"):
                yield Label("starting", id="title")
                yield ProgressBar(total=None, show_eta=False, id="bar")
                yield Label("", id="eta")
                yield Label("", id="phase")
                yield Static("", id="lanes")
            yield Static("best: nothing verified yet", id="best")
        yield BestChart(id="chart")
        yield DataTable(id="trials", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#trials", DataTable)
        for col in COLUMNS:
            table.add_column(col, key=col)
        self.started = time.monotonic()
        self._run()

    # ------------------------------------------------------------------------------------- the worker

    @work(thread=True, exclusive=True, group="tune", name="tune", exit_on_error=False)
    def _run(self) -> None:
        from tracea.doctor.errors import TraceaError
        from tracea.tuner.run import tune

        held: list[Any] = []  # messages that arrived while a timing ran

        def post(msg: Any) -> None:
            (held.append if held else self.post_message)(msg)

        def flush() -> None:  # a timing ended: show what it held, in order
            for msg in held:
                self.post_message(msg)
            held.clear()

        def on_event(kind: str, data: dict[str, Any]) -> None:
            timing = kind == "phase" and data["phase"] == "run" and self.quiet_timing
            if not timing:
                flush()
            if timing:
                drawn = threading.Event()
                self.post_message(Hush(drawn))
                drawn.wait(HUSH_WAIT_S)  # the worker process waits for this before it times
                settle_quietly()
                held.append(PhaseChanged(data["index"], data["name"], data["phase"]))
            elif kind == "start":
                post(TuneStarted(data))
            elif kind == "baseline":
                post(BaselineMeasured(data["baseline"]))
            elif kind == "phase":
                post(PhaseChanged(data["index"], data["name"], data["phase"], data.get("member")))
            elif kind == "trial":
                post(TrialFinished(data["trial"], data["best_ms"], data["done"], data["budget"], data["elapsed_s"],
                                   data.get("member")))

        try:
            result = (self.tuner or tune)(self.op, self.host, self.config, on_event=on_event, control=self.control)
        except TraceaError as exc:
            flush()
            self.post_message(TuneFailed(exc.message + (f" ({exc.hint})" if exc.hint else "")))
            return
        except Exception as exc:  # noqa: BLE001 - shown in the dashboard, kept for the caller
            flush()
            self.post_message(TuneFailed(f"{type(exc).__name__}: {exc}"))
            return
        flush()
        self.post_message(TuneFinished(result))

    # ------------------------------------------------------------------------------------- handlers

    def _tflops(self, ms: float | None) -> float | None:
        op = self.info.get("op", self.op)
        return op.flops / (ms * 1e-3) / 1e12 if ms and op is not None else None

    def on_tune_started(self, msg: TuneStarted) -> None:
        self.info = msg.info
        op = msg.info["op"]
        self.query_one("#title", Label).update(
            f"{escape(op.signature)}\n{msg.info['variant']} · {msg.info['space_size']} candidates · "
            f"{msg.info['strategy']} · budget {msg.info['budget']}"
            + (" · simulated" if msg.info.get("simulated") else "")
            + (f" · {msg.info['known']} known" if msg.info.get("known") else "")
            + (f" · {msg.info['pruned']} pruned (bank conflicts)" if msg.info.get("pruned") else ""))
        self.query_one("#bar", ProgressBar).update(total=msg.info["budget"], progress=0)

    def on_hush(self, msg: Hush) -> None:
        self.hush_count += 1
        self.query_one("#phase", Label).update("timing (display paused)")
        self.call_after_refresh(msg.drawn.set)

    def on_baseline_measured(self, msg: BaselineMeasured) -> None:
        self.baseline = msg.baseline
        self._show_best()

    def on_phase_changed(self, msg: PhaseChanged) -> None:
        where = f"#{msg.index} " if msg.index is not None else ""
        if msg.member is None:
            self.query_one("#phase", Label).update(f"{msg.phase}: {where}{escape(msg.name)}")
            return
        lane = self.lanes.setdefault(msg.member, ["", None, "", 0])
        lane[:3] = [msg.phase, msg.index, msg.name]
        self._show_lanes()

    def _show_lanes(self) -> None:
        """One line a worker of a pool: its phase, its candidate, the trials it finished."""
        lines = []
        for m in sorted(self.lanes):
            phase, index, name, done = self.lanes[m]
            what = f"{phase}: #{index} {escape(name)}" if phase else "idle"
            lines.append(f"worker {m}: {what} · {done} done")
        self.query_one("#lanes", Static).update("\n".join(lines))

    def on_trial_finished(self, msg: TrialFinished) -> None:
        self.trials.append(msg.trial)
        if msg.member is not None:
            lane = self.lanes.setdefault(msg.member, ["", None, "", 0])
            lane[0], lane[3] = "", lane[3] + 1
            self._show_lanes()
        self.best_ms = msg.best_ms
        self.query_one("#bar", ProgressBar).update(total=msg.budget, progress=msg.done)
        left = msg.budget - msg.done
        eta = msg.elapsed_s / max(1, msg.done) * left
        self.query_one("#eta", Label).update(f"{msg.done}/{msg.budget} · {msg.elapsed_s:.0f} s elapsed · "
                                             f"ETA {eta:.0f} s" + (" · paused" if self.control.paused else ""))
        self._add_row(msg.trial)
        self.query_one("#chart", BestChart).add(self._tflops(msg.best_ms), self._tflops((self.baseline or {}).get("p50_ms")))
        self._show_best()

    def on_tune_finished(self, msg: TuneFinished) -> None:
        self.result = msg.result
        self.best_ms = (msg.result.best or {}).get("p50_ms")
        self.query_one("#phase", Label).update(f"finished: {escape(msg.result.stop_reason)}")
        self._show_best()
        self.notify(f"tuning finished: {msg.result.stop_reason}")

    def on_tune_failed(self, msg: TuneFailed) -> None:
        self.error = msg.error
        self.query_one("#phase", Label).update(f"[red]failed[/red]: {escape(msg.error)}")
        self.notify(msg.error, severity="error")

    # ------------------------------------------------------------------------------------- views

    def _cells(self, t: Any) -> list[str]:
        m = t.measurement
        tf = self._tflops(m.p50_ms) if m.ok else None
        return [str(t.index), t.name, m.status, f"{m.p50_ms:.3f}" if m.p50_ms else "-",
                f"{m.p95_ms:.3f}" if m.p95_ms else "-", f"{tf:.3f}" if tf else "-",
                f"{m.compile_s:.2f}" if m.compile_s else "-", (m.error or "")[:120]]

    def _add_row(self, t: Any) -> None:
        table = self.query_one("#trials", DataTable)
        table.add_row(*self._cells(t), key=str(len(self.trials) - 1))
        if self.sort_key is not None:
            self._sort()

    def _sort(self) -> None:
        table = self.query_one("#trials", DataTable)
        if self.sort_key in ("p50 ms", "#"):  # numbers; "-" (failed) last
            table.sort(self.sort_key, key=lambda v: (v == "-", float(v) if v != "-" else 0.0))
        elif self.sort_key is not None:
            table.sort(self.sort_key)

    def _show_best(self) -> None:
        best = self.result.best if self.result is not None else None
        if best is None and self.trials:
            ok = [t for t in self.trials if t.objective is not None]
            if ok:
                b = min(ok, key=lambda t: t.objective)
                best = {"name": b.name, "p50_ms": b.objective}
        base = self.baseline or {}
        lines = []
        if best:
            lines.append(f"best: {escape(best['name'])}")
            lines.append(f"{best['p50_ms']:.3f} ms · {self._tflops(best['p50_ms']):.3f} TFLOP/s")
            if base.get("p50_ms"):
                ours = base.get("tracea_p50_ms") or best["p50_ms"]  # the final interleaved timing, when made
                lines.append(f"{base['p50_ms'] / ours:.2f}x vs {escape(str(base.get('name')))} "
                             f"({base['p50_ms']:.3f} ms{', interleaved' if base.get('interleaved') else ''})")
        else:
            lines.append("best: nothing verified yet")
        if base.get("unstable"):
            lines.append(f"no ratio: {escape(str(base['reason']))}")
        elif not base.get("p50_ms") and base.get("reason"):
            lines.append(f"no baseline: {escape(str(base['reason']))}")
        if base.get("p50_ms") and base.get("note"):
            lines.append(f"warning: {escape(str(base['note']))}")
        self.query_one("#best", Static).update("\n".join(lines))

    # ------------------------------------------------------------------------------------- actions

    def action_pause(self) -> None:
        self.control.pause()
        self.notify("paused after the candidate in flight (r resumes)")

    def action_resume(self) -> None:
        self.control.resume()
        self.notify("resumed")

    def action_stop(self) -> None:
        self.control.stop()
        self.notify("stopping after the candidate in flight; every result is kept")

    def action_sort(self) -> None:
        i = SORTABLE.index(self.sort_key) + 1 if self.sort_key in SORTABLE else 0
        self.sort_key = SORTABLE[i % len(SORTABLE)]
        self._sort()
        self.notify(f"sorted by {self.sort_key}")

    def action_save(self) -> None:
        from tracea.doctor.files import write_atomic

        doc = (self.result.to_json() if self.result is not None else
               {"op": self.info["op"].to_json() if self.info else None, "variant": self.info.get("variant"),
                "partial": True, "baseline": self.baseline, "trials": [t.to_json() for t in self.trials]})
        path = self.save_dir / f"tracea-tune-{time.strftime('%Y%m%d-%H%M%S')}.json"
        try:
            write_atomic(path, json.dumps(doc, indent=1, default=str) + "\n")
        except OSError as exc:
            self.notify(f"cannot save {path}: {exc.strerror or exc}", severity="error")
            return
        self.saved = path
        self.notify(f"saved {path}")

    def action_quit_tune(self) -> None:
        self.control.stop()
        self.exit(self.result)


def run_tune_tui(op: Any, host: Any, config: Any) -> Any:
    """Open the dashboard; returns the TuneResult once the run finished and the user quit (None when the
    user quit before the run ended: the trials so far are in the database)."""
    app = TuneApp(op, host, config)
    result = app.run()
    if app.error:
        from tracea.doctor.errors import TraceaError

        raise TraceaError(app.error)
    return result
