"""The right-hand details of the selected tree node, in ``tracea doctor``'s words."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tracea.doctor.report import HostReport

from ..render import MARK_STYLE
from .model import Line, detail_lines

LABEL_WIDTH = 14  # the label column of render_doctor's rows


def lines_text(title: str, lines: list[Line]) -> Text:
    text = Text(title + "\n", style="bold")
    for label, value in lines:
        mark = MARK_STYLE.get(label)
        if mark is not None:  # a check row: its symbol and colour, as in the checks panel
            symbol, colour = mark
            text.append(f"{symbol} {label:<{LABEL_WIDTH - 2}}", style=colour)
        else:
            text.append(f"{label:<{LABEL_WIDTH}}", style="bold cyan")
        text.append(f" {value}\n")
    text.rstrip()
    return text


class DetailsPanel(Static):
    """Shows one node; keeps the rows it shows so tests compare them with ``tracea.render``."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.node_key: str | None = None
        self.rows: list[Line] = []

    def show(self, report: HostReport, key: str, title: str) -> None:
        self.node_key = key
        self.rows = detail_lines(report, key)
        self.update(lines_text(title, self.rows))

    @property
    def plain(self) -> str:
        content = self.content
        return content.plain if isinstance(content, Text) else str(content)
