"""One telemetry series: its current value beside a sparkline of its recent history."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, Sparkline

from .samples import Reading


def format_reading(label: str, unit: str, reading: Reading | None) -> str:
    if reading is None:
        return f"{label} …"
    if reading.value is None:
        return f"{label} n/a ({reading.error})"
    return f"{label} {reading.value:.0f} {unit}"


class MetricCell(Horizontal):
    DEFAULT_CSS = """
    MetricCell { height: 1; width: 1fr; }
    MetricCell > Label { width: 14; }
    MetricCell > Sparkline { width: 1fr; margin-right: 2; }
    """

    def __init__(self, label: str, unit: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.label, self.unit = label, unit
        self._value = Label(format_reading(label, unit, None))
        self.sparkline = Sparkline([])

    def compose(self) -> ComposeResult:
        yield self._value
        yield self.sparkline

    def show(self, reading: Reading | None, history: list[float]) -> None:
        self._value.update(format_reading(self.label, self.unit, reading))
        # The sparkline scales between the window's min and max; the label carries the absolute value.
        self.sparkline.data = history
        grow_with_history(self.sparkline, history)


def grow_with_history(sparkline: Sparkline, history: list[float]) -> None:
    """One column per sample until the widget is full: a sparkline stretches few samples into wide
    blocks, which reads as a change in the data rather than as "only three samples so far"."""
    sparkline.styles.max_width = max(1, len(history))
