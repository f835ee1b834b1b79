"""Telemetry samples as numbers, and the short history the sparklines draw.

A poll from ``tracea.doctor.sources.nvml.Telemetry`` is raw NVML answers, any of which may be an
error record (``{"error": "NotSupported", ...}``); here each becomes a number or ``None`` with the
error's name, so the widgets never look inside NVML's shapes. No Textual here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# (metric key, label, unit); the four series the issue asks for, in the order they are drawn.
GPU_METRICS: tuple[tuple[str, str, str], ...] = (
    ("utilization_gpu", "util", "%"),
    ("clock_sm", "SM", "MHz"),
    ("temperature", "temp", "°C"),
    ("power", "power", "W"),
)

HISTORY_LEN = 120  # two minutes at the default one poll a second: enough to see a kernel's trace


@dataclass(frozen=True)
class Reading:
    """One metric of one poll: a value, or why there is none."""

    value: float | None
    error: str | None = None


def _error(answer: Any) -> str | None:
    if isinstance(answer, Mapping) and "error" in answer:
        return str(answer.get("error"))
    return None


def _number(answer: Any, scale: float = 1.0) -> Reading:
    err = _error(answer)
    if err is not None:
        return Reading(None, err)
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return Reading(answer * scale)
    return Reading(None, "missing")


def gpu_readings(calls: Mapping[str, Any]) -> dict[str, Reading]:
    """NVML telemetry answers of one device -> {metric key: Reading} for ``GPU_METRICS``."""
    util = calls.get("utilization")
    if isinstance(util, Mapping) and _error(util) is None:
        util_reading = _number(util.get("gpu"))
    else:
        util_reading = _number(util)
    return {
        "utilization_gpu": util_reading,
        "clock_sm": _number(calls.get("clock_sm_mhz")),
        "temperature": _number(calls.get("temperature_c")),
        "power": _number(calls.get("power_usage_mw"), 1e-3),  # NVML answers milliwatts
    }


class History:
    """The last ``maxlen`` values of each named series (missing readings are not drawn)."""

    def __init__(self, maxlen: int = HISTORY_LEN) -> None:
        self._maxlen = maxlen
        self._series: dict[str, deque[float]] = {}

    def add(self, name: str, value: float | None) -> None:
        series = self._series.setdefault(name, deque(maxlen=self._maxlen))
        if value is not None:
            series.append(float(value))

    def values(self, name: str) -> list[float]:
        return list(self._series.get(name, ()))


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None
