"""Replays an NVML answer set recorded by ``tracea doctor --save`` on a real machine, as an object
with pynvml's function names, so the real collector code runs against real answers on a machine
with no GPU. Errors are real pynvml exceptions (``pynvml.NVMLError(code)``), recorded or injected.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml

from tracea.doctor.sources.nvml import ALIASES, DEVICE_CALLS

# How each recorded value is rebuilt into the shape pynvml returns.
REBUILD = {
    "pci_bus_id": lambda v: SimpleNamespace(busId=v),
    "memory_info": lambda v: SimpleNamespace(**v),
    "utilization": lambda v: SimpleNamespace(**v),
    "cuda_compute_capability": tuple,
    "mig_mode": tuple,
}


class RecordedNvml:
    def __init__(self, raw: dict[str, Any], init_error: int | None = None,
                 inject: dict[tuple[int, str], int] | None = None) -> None:
        self.raw = raw
        self.init_error = init_error
        self.inject = inject or {}
        self.initialised = 0
        self.shutdowns = 0
        by_fn: dict[tuple[str, tuple], str] = {}
        for key, fn_name, args, _ in DEVICE_CALLS:
            by_fn[(fn_name, args)] = key
        self._by_fn = by_fn

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def _system(self, key: str) -> Any:
        v = self.raw[key]
        if isinstance(v, dict) and "error" in v:
            raise pynvml.NVMLError(v["code"])
        return v

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._system("driver_version")

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._system("cuda_driver_version")

    def nvmlSystemGetNVMLVersion(self) -> str:
        return self._system("nvml_version")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.raw["devices"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def __getattr__(self, name: str) -> Any:
        fn_name = next((k for k, v in ALIASES.items() if v == name), name)

        def call(handle: int, *args: Any) -> Any:
            key = self._by_fn.get((fn_name, args))
            if key is None:
                raise AttributeError(name)
            if (handle, key) in self.inject:
                raise pynvml.NVMLError(self.inject[(handle, key)])
            value = self.raw["devices"][handle]["calls"][key]
            if isinstance(value, dict) and "error" in value:
                raise pynvml.NVMLError(value["code"])
            return REBUILD.get(key, lambda v: v)(value)

        if not any(fn_name == f for _, f, _, _ in DEVICE_CALLS):
            raise AttributeError(name)
        return call
