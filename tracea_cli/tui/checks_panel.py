"""The checks: each mark coloured as ``tracea doctor`` colours it, with its hint."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tracea.doctor.report import PROBLEM, WARNING, HostReport

from ..render import MARK_STYLE


def checks_text(report: HostReport) -> Text:
    text = Text()
    rows = [(c.mark, c.message, c.hint) for c in report.checks]
    rows += [(PROBLEM, f"probe error: {e}", None) for e in report.errors]
    rows += [(WARNING, w, None) for w in report.warnings]
    for mark, message, hint in rows:
        symbol, colour = MARK_STYLE[mark]
        text.append(f"{symbol} ", style=f"bold {colour}")
        text.append(f"{message}\n", style=colour if mark != "ok" else "")
        if hint:
            text.append(f"    hint: {hint}\n", style="dim")
    if not rows:
        text.append("no checks ran")
    text.rstrip()
    return text


class ChecksPanel(Static):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.border_title = "Checks"

    def show(self, report: HostReport) -> None:
        self.update(checks_text(report))
        self.border_subtitle = f"worst: {report.worst_mark}"

    @property
    def plain(self) -> str:
        content = self.content
        return content.plain if isinstance(content, Text) else str(content)
