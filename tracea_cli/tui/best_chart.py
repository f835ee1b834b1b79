"""Best-so-far over trials: the fastest verified TFLOP/s after each trial, as a sparkline with its
current value and the baseline's for scale."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline


class BestChart(Vertical):
    DEFAULT_CSS = """
    BestChart { height: 6; border: round $primary; padding: 0 1; }
    BestChart Sparkline { height: 3; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.values: list[float] = []

    def compose(self) -> ComposeResult:
        yield Label("best so far (TFLOP/s): waiting for a verified candidate", id="chart-label")
        yield Sparkline([], summary_function=max, id="chart-line")

    def add(self, best_tflops: float | None, baseline_tflops: float | None = None) -> None:
        """Append the best-so-far after one more trial (0 until something verified)."""
        self.values.append(best_tflops or 0.0)
        self.query_one("#chart-line", Sparkline).data = list(self.values)
        if best_tflops:
            text = f"best so far: {best_tflops:.3f} TFLOP/s after {len(self.values)} trials"
            if baseline_tflops:
                text += f" · baseline {baseline_tflops:.3f}"
            self.query_one("#chart-label", Label).update(text)
