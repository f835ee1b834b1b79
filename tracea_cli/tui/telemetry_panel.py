"""The telemetry panel: live GPU sparklines and CPU load, or what a replayed snapshot recorded."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from tracea.doctor.report import HostReport

from ..render import gpu_lines
from .cpu_load import CpuLoad
from .gpu_telemetry import GpuTelemetry
from .messages import TelemetrySampled
from .model import origin_name

RECORDED_ROWS = ("clocks", "telemetry")  # the gpu_lines rows that hold what a poll would show


def replay_note(report: HostReport) -> str:
    return f"replay of {origin_name(report.origin)}, no live telemetry"


def recorded_text(report: HostReport) -> Text:
    text = Text(replay_note(report) + "\n", style="bold yellow")
    if not report.nvidia.devices:
        text.append(f"no NVIDIA GPU recorded: {report.nvidia.reason or 'unknown reason'}\n")
    for g in report.nvidia.devices:
        text.append(f"GPU {g.cuda_index} · {g.name or '?'} (recorded at {report.created_at})\n", style="bold")
        for label, value in gpu_lines(g):
            if label in RECORDED_ROWS:
                text.append(f"  {label:<12} {value}\n")
    text.append("CPU load is not recorded in snapshots")
    return text


class TelemetryPanel(VerticalScroll):
    """Live: one ``GpuTelemetry`` per NVML device that answers, then ``CpuLoad``. Replay: text."""

    DEFAULT_CSS = """
    TelemetryPanel { height: auto; max-height: 20; }
    TelemetryPanel > #telemetry-note { height: auto; color: $text-muted; }
    """

    def __init__(self, report: HostReport, live: bool, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Telemetry"
        self.live = live
        self.report = report
        self.note = Static("", id="telemetry-note")
        self.cpu = CpuLoad(id="cpu-load")
        self.gpus: dict[int, GpuTelemetry] = {}
        self.gpu_error: str | None = None

    def compose(self) -> ComposeResult:
        yield self.note
        if self.live:
            yield self.cpu

    def on_mount(self) -> None:
        self.show(self.report)

    def show(self, report: HostReport) -> None:
        """Re-say the note for ``report`` (after a refresh the reason for no GPU may have changed)."""
        self.report = report
        if not self.live:
            self.note.update(recorded_text(report))
            return
        self._live_note()

    def _live_note(self) -> None:
        if self.gpus:
            self.note.update("")
            self.note.display = False
            return
        self.note.display = True
        reason = self.gpu_error or self.report.nvidia.reason or "NVML reports no device"
        if self.report.nvidia.devices and not self.gpu_error:
            self.note.update("waiting for the first GPU sample …")
        else:
            self.note.update(f"no GPU telemetry: {reason}")

    def _gpu_title(self, nvml_index: int) -> str:
        for g in self.report.nvidia.devices:
            if g.nvml_index == nvml_index:
                return f"GPU {g.cuda_index} · {g.name or '?'}"
        return f"NVML device {nvml_index} (hidden from CUDA)"

    def add_sample(self, sample: TelemetrySampled) -> None:
        self.gpu_error = sample.gpu_error
        for entry in sample.gpus:
            index = int(entry.get("index", len(self.gpus)))
            widget = self.gpus.get(index)
            if widget is None:
                widget = self.gpus[index] = GpuTelemetry(self._gpu_title(index), id=f"gpu-{index}")
                self.mount(widget, before=self.cpu)
            widget.add(entry.get("calls") or {})
        self.cpu.add(sample.cpu_percent)
        self._live_note()
