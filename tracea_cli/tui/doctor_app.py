"""``tracea doctor --tui``: the doctor's report as a tree with details, checks and live telemetry.

``DoctorApp`` is the factory the tests reuse: the telemetry source and the probe are injectable, so a
test drives the app with recorded answers instead of this machine's. Blocking work (NVML polls,
re-probing the machine) runs in thread workers that post the messages of ``messages.py``.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Protocol

import psutil
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Tree
from textual.worker import Worker, WorkerState, get_current_worker

from tracea.doctor.report import HostReport

from .checks_panel import ChecksPanel
from .details_panel import DetailsPanel
from .device_tree import DeviceTree
from .messages import RefreshFailed, ReportRefreshed, TelemetrySampled
from .model import HOST, node_title, origin_name, tree_spec
from .telemetry_panel import TelemetryPanel


class TelemetrySource(Protocol):
    """What the app needs of ``tracea.doctor.sources.nvml.Telemetry`` (tests pass recorded samples)."""

    def poll(self) -> list[dict[str, Any]]: ...


Probe = Callable[[], tuple[dict[str, Any], HostReport]]


def probe_this_machine() -> tuple[dict[str, Any], HostReport]:
    from tracea.doctor.snapshot import build_report, collect_raw

    raw = collect_raw()
    return raw, build_report(raw)


def snapshot_name(now: _dt.datetime | None = None) -> str:
    return f"tracea-doctor-{(now or _dt.datetime.now()).strftime('%Y%m%d-%H%M%S')}.json"


class DoctorApp(App[None]):
    TITLE = "Tracea doctor"
    CSS = """
    #main { height: 1fr; }
    #tree { width: 30%; min-width: 28; max-width: 44; border: round $primary; }
    #right { width: 1fr; }
    #details-scroll { height: 1fr; border: round $primary; border-title-color: $text; }
    #telemetry { border: round $secondary; }
    #checks-scroll { height: auto; max-height: 12; border: round $secondary; }
    #checks-scroll > ChecksPanel { height: auto; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("r", "refresh", "Refresh"),
        Binding("s", "save", "Save snapshot"),
    ]

    def __init__(
        self,
        report: HostReport,
        raw: dict[str, Any] | None,
        live: bool,
        telemetry: TelemetrySource | None = None,
        save_dir: str | Path | None = None,
        poll_interval_s: float = 1.0,
        probe: Probe | None = None,
    ) -> None:
        super().__init__()
        self.report = report
        self.raw = raw
        self.live = live
        self.save_dir = Path(save_dir) if save_dir is not None else None
        self.poll_interval_s = poll_interval_s
        self.probe = probe or probe_this_machine
        self._telemetry = telemetry
        self.telemetry_worker: Worker[None] | None = None
        self.polls = 0  # completed polls: tests and the sub-title read it
        self.refreshing = False
        self.saved: list[Path] = []

    # -- layout ------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            yield DeviceTree(id="tree")
            with Vertical(id="right"):
                with VerticalScroll(id="details-scroll"):
                    yield DetailsPanel(id="details")
                yield TelemetryPanel(self.report, self.live, id="telemetry")
                with VerticalScroll(id="checks-scroll"):
                    yield ChecksPanel(id="checks")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DeviceTree).border_title = "Devices"
        self.query_one("#details-scroll").border_title = "Details"
        self.query_one("#checks-scroll").border_title = "Checks"
        self._show(self.report, HOST)
        self.query_one(DeviceTree).focus()
        if self.live:
            self.telemetry_worker = self._poll_telemetry()

    def _show(self, report: HostReport, key: str | None) -> None:
        """Render ``report`` everywhere, keeping the selected node where it still exists."""
        self.report = report
        tree = self.query_one(DeviceTree)
        tree.show(report, key)
        key = key if key in tree.keys else HOST
        self._show_details(key)
        self.query_one(ChecksPanel).show(report)
        self.query_one(TelemetryPanel).show(report)
        mode = "live" if self.live else f"replay of {origin_name(report.origin)}"
        self.sub_title = f"{mode} · {report.created_at}"

    def _show_details(self, key: str) -> None:
        title = node_title(tree_spec(self.report), key)
        if self.live and key.startswith("nvidia:"):
            # The report's clocks and power are from the probe; say so beside the live sparklines.
            title += f" (as probed at {self.report.created_at}; live values under Telemetry)"
        self.query_one(DetailsPanel).show(self.report, key, title)

    @on(Tree.NodeHighlighted, "#tree")
    def _node_highlighted(self, event: Tree.NodeHighlighted[str]) -> None:
        if event.node.data is not None:
            self._show_details(event.node.data)

    # -- live telemetry ----------------------------------------------------------------------------

    def _telemetry_source(self) -> TelemetrySource | None:
        if self._telemetry is None and self.report.nvidia.devices:
            from tracea.doctor.sources.nvml import Telemetry

            self._telemetry = Telemetry()
        return self._telemetry  # None: no NVIDIA GPU was found, so NVML is not even initialised

    @work(thread=True, exclusive=True, group="telemetry", name="telemetry", exit_on_error=False)
    def _poll_telemetry(self) -> None:
        worker = get_current_worker()
        source = self._telemetry_source()
        psutil.cpu_percent(percpu=True)  # the first call only starts psutil's interval
        try:
            # Waiting on the cancel event, not sleeping, so quitting never waits out an interval;
            # the wait is measured from the start of the last poll, so a slow NVML poll does not
            # push the rate above one poll per interval nor stretch it.
            wait = self.poll_interval_s
            while not worker.cancelled_event.wait(wait):
                started = time.monotonic()
                gpus: list[dict[str, Any]] = []
                gpu_error = None
                if source is not None:
                    try:
                        gpus = source.poll()
                    except Exception as exc:  # noqa: BLE001 - a failing poll is shown, not fatal
                        gpu_error = f"poll failed: {type(exc).__name__}: {exc}"
                    gpu_error = gpu_error or getattr(source, "error", None)
                cpu = psutil.cpu_percent(percpu=True)
                if worker.is_cancelled:
                    break
                self.post_message(TelemetrySampled(gpus, cpu, gpu_error))
                wait = max(0.0, self.poll_interval_s - (time.monotonic() - started))
        finally:
            close = getattr(source, "close", None)
            if callable(close):
                close()

    def on_telemetry_sampled(self, message: TelemetrySampled) -> None:
        self.polls += 1
        self.query_one(TelemetryPanel).add_sample(message)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:  # exit_on_error=False: say so instead of dying silently
            self.notify(f"{event.worker.name} stopped: {event.worker.error}", severity="error")

    # -- keys --------------------------------------------------------------------------------------

    def action_refresh(self) -> None:
        if not self.live:
            self._show(self.report, self.query_one(DeviceTree).cursor_key)
            self.notify(f"re-rendered the replay of {origin_name(self.report.origin)}")
            return
        if self.refreshing:
            self.notify("a probe is already running")
            return
        self.refreshing = True
        self.sub_title = "probing this machine …"
        self._reprobe()

    @work(thread=True, exclusive=True, group="probe", name="probe", exit_on_error=False)
    def _reprobe(self) -> None:
        try:
            raw, report = self.probe()
        except Exception as exc:  # noqa: BLE001 - the old report stays; the error is shown
            self.post_message(RefreshFailed(f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(ReportRefreshed(report, raw))

    def on_report_refreshed(self, message: ReportRefreshed) -> None:
        self.refreshing = False
        self.raw = message.raw
        self._show(message.report, self.query_one(DeviceTree).cursor_key)
        self.notify("probed this machine again")

    def on_refresh_failed(self, message: RefreshFailed) -> None:
        self.refreshing = False
        self._show(self.report, self.query_one(DeviceTree).cursor_key)
        self.notify(f"probe failed: {message.error}", severity="error")

    def action_save(self) -> None:
        from tracea.doctor.snapshot import snapshot_document, write_json_atomic

        if self.raw is None:
            self.notify("this is a report without raw answers; it cannot be saved as a snapshot",
                        severity="warning")
            return
        folder = self.save_dir or Path.cwd()
        path = folder / snapshot_name()
        n = 1
        while path.exists():  # two saves in one second: never overwrite the first
            path = folder / f"{path.stem.split('~')[0]}~{n}.json"
            n += 1
        try:
            write_json_atomic(path, snapshot_document(self.raw, self.report))
        except OSError as exc:
            self.notify(f"could not save {path}: {exc}", severity="error")
            return
        self.saved.append(path)
        self.notify(f"snapshot saved to {path}")


def run_doctor_tui(report: HostReport, raw: dict[str, Any] | None, live: bool) -> None:
    """Open the TUI (``tracea doctor --tui``); returns when the user quits."""
    DoctorApp(report, raw, live).run()
