"""Every message the doctor TUI's workers post, in one place (the harlequin/posting habit).

Workers run in threads and never touch widgets; they post one of these and the app's handler,
on the UI thread, updates the widgets.
"""

from __future__ import annotations

from typing import Any

from textual.message import Message

from tracea.doctor.report import HostReport


class TelemetrySampled(Message):
    """One poll: NVML answers per device (``[{"index", "calls"}]``) and per-core CPU load in percent."""

    def __init__(self, gpus: list[dict[str, Any]], cpu_percent: list[float], gpu_error: str | None = None) -> None:
        super().__init__()
        self.gpus = gpus
        self.cpu_percent = cpu_percent
        self.gpu_error = gpu_error  # why NVML gave no samples at all (init failed, poll raised)


class ReportRefreshed(Message):
    """A fresh probe of this machine finished."""

    def __init__(self, report: HostReport, raw: dict[str, Any]) -> None:
        super().__init__()
        self.report = report
        self.raw = raw


class RefreshFailed(Message):
    """A fresh probe raised; the old report stays on screen."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error
