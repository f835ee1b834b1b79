"""One NVIDIA GPU's live telemetry: utilization, SM clock, temperature and power as sparklines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label

from .metric_cell import MetricCell
from .samples import GPU_METRICS, History, Reading, gpu_readings


class GpuTelemetry(Vertical):
    DEFAULT_CSS = """
    GpuTelemetry { height: auto; }
    GpuTelemetry > Label { text-style: bold; }
    GpuTelemetry > Horizontal { height: 1; }
    """

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.heading = title
        self.history = History()
        self.last: dict[str, Reading] = {}
        self.samples = 0
        self.cells = {key: MetricCell(label, unit, id=f"{key}") for key, label, unit in GPU_METRICS}

    def compose(self) -> ComposeResult:
        yield Label(self.heading)
        with Horizontal():
            yield from self.cells.values()

    def on_mount(self) -> None:
        self._sync()  # samples may have arrived between construction and mounting

    def add(self, calls: Mapping[str, Any]) -> None:
        self.last = gpu_readings(calls)
        for key, reading in self.last.items():
            self.history.add(key, reading.value)
        self.samples += 1
        if self.is_mounted:
            self._sync()

    def _sync(self) -> None:
        for key, cell in self.cells.items():
            cell.show(self.last.get(key), self.history.values(key))
