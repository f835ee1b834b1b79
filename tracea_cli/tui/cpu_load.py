"""Per-core CPU load as bars on a fixed 0-100 % scale, and the average load's recent history."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline, Static

from .metric_cell import grow_with_history
from .samples import History, mean

BARS = "▁▂▃▄▅▆▇█"
CORES_PER_ROW = 32
GROUP = 8  # a gap every 8 cores so a core can be found by eye


def _colour(percent: float) -> str:
    return "green" if percent < 50 else "yellow" if percent < 85 else "red"


def core_bars(percents: list[float]) -> Text:
    """One character per core; unlike a sparkline the scale is fixed, so 5 % never looks busy."""
    text = Text()
    for row_start in range(0, len(percents), CORES_PER_ROW):
        text.append(f"{row_start:>4} ", style="dim")
        for i, p in enumerate(percents[row_start:row_start + CORES_PER_ROW]):
            if i and i % GROUP == 0:
                text.append(" ")
            level = min(len(BARS) - 1, int(max(0.0, p) / 100 * len(BARS)))
            text.append(BARS[level], style=_colour(p))
        text.append("\n")
    text.rstrip()
    return text


class CpuLoad(Vertical):
    DEFAULT_CSS = """
    CpuLoad { height: auto; }
    CpuLoad > Label { text-style: bold; }
    CpuLoad > Sparkline { height: 1; margin-right: 2; }
    CpuLoad > Static { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history = History()
        self.percents: list[float] = []
        self.samples = 0
        self._summary = Label("CPU load …")
        self.sparkline = Sparkline([])
        self._bars = Static("")

    def compose(self) -> ComposeResult:
        yield self._summary
        yield self.sparkline
        yield self._bars

    def on_mount(self) -> None:
        self._sync()

    def add(self, percents: list[float]) -> None:
        self.percents = list(percents)
        self.history.add("average", mean(self.percents))
        self.samples += 1
        if self.is_mounted:
            self._sync()

    def _sync(self) -> None:
        if not self.percents:
            return
        avg = mean(self.percents) or 0.0
        busiest = max(range(len(self.percents)), key=self.percents.__getitem__)
        self._summary.update(f"CPU load · {len(self.percents)} logical cores · average {avg:.0f} % "
                             f"(history below) · busiest core {busiest}: {self.percents[busiest]:.0f} %")
        self.sparkline.data = self.history.values("average")
        grow_with_history(self.sparkline, self.sparkline.data)
        self._bars.update(core_bars(self.percents))
