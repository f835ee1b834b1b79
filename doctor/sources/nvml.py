"""NVIDIA GPUs through NVML (nvidia-ml-py, imported as ``pynvml``).

``collect()`` records every NVML answer as it came (a value, or the name of the NVML error for that
one call), so a snapshot keeps the raw truth and one unsupported field costs only that field.
``interpret()`` lives in ``nvidia.py``, which joins these answers with cuda-core's.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()


def _error_name(exc: BaseException) -> str:
    """``NVMLError_LibraryNotFound`` -> ``LibraryNotFound``; anything else -> its class name."""
    name = type(exc).__name__
    return name.split("NVMLError_", 1)[1] if name.startswith("NVMLError_") else name


def _error_record(exc: BaseException) -> dict[str, Any]:
    return {"error": _error_name(exc), "code": getattr(exc, "value", None), "message": str(exc)}


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


# (key, pynvml function name, extra args, converter). Converters turn ctypes structs into JSON.
DEVICE_CALLS: list[tuple[str, str, tuple, Callable[[Any], Any]]] = [
    ("name", "nvmlDeviceGetName", (), _text),
    ("uuid", "nvmlDeviceGetUUID", (), _text),
    ("pci_bus_id", "nvmlDeviceGetPciInfo", (), lambda p: _text(p.busId)),
    ("cuda_compute_capability", "nvmlDeviceGetCudaComputeCapability", (), list),
    ("architecture", "nvmlDeviceGetArchitecture", (), int),
    ("memory_info", "nvmlDeviceGetMemoryInfo", (), lambda m: {"total": m.total, "used": m.used, "free": m.free}),
    ("memory_bus_width", "nvmlDeviceGetMemoryBusWidth", (), int),
    ("num_gpu_cores", "nvmlDeviceGetNumGpuCores", (), int),
    ("clock_sm_mhz", "nvmlDeviceGetClockInfo", (1,), int),  # NVML_CLOCK_SM
    ("clock_mem_mhz", "nvmlDeviceGetClockInfo", (2,), int),  # NVML_CLOCK_MEM
    ("max_clock_sm_mhz", "nvmlDeviceGetMaxClockInfo", (1,), int),
    ("max_clock_mem_mhz", "nvmlDeviceGetMaxClockInfo", (2,), int),
    ("power_usage_mw", "nvmlDeviceGetPowerUsage", (), int),
    ("power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit", (), int),
    ("temperature_c", "nvmlDeviceGetTemperature", (0,), int),  # NVML_TEMPERATURE_GPU
    ("utilization", "nvmlDeviceGetUtilizationRates", (), lambda u: {"gpu": u.gpu, "memory": u.memory}),
    ("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", (), int),
    ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", (), int),
    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", (), int),
    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", (), int),
    ("mig_mode", "nvmlDeviceGetMigMode", (), list),
    ("persistence_mode", "nvmlDeviceGetPersistenceMode", (), int),
    ("clocks_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", (), int),
]

# Fallback names for older nvidia-ml-py releases.
ALIASES = {"nvmlDeviceGetCurrentClocksEventReasons": "nvmlDeviceGetCurrentClocksThrottleReasons"}

TELEMETRY_KEYS = (
    "clock_sm_mhz", "clock_mem_mhz", "power_usage_mw", "temperature_c", "utilization", "memory_info",
    "clocks_event_reasons",
)


def _call(nvml: Any, fn_name: str, *args: Any) -> Any:
    fn = getattr(nvml, fn_name, None) or getattr(nvml, ALIASES.get(fn_name, ""), None)
    if fn is None:
        raise AttributeError(f"{fn_name} is not in this nvidia-ml-py")
    return fn(*args)


def _device_calls(nvml: Any, handle: Any, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    calls: dict[str, Any] = {}
    for key, fn_name, args, convert in DEVICE_CALLS:
        if keys is not None and key not in keys:
            continue
        try:
            calls[key] = convert(_call(nvml, fn_name, handle, *args))
        except Exception as exc:  # noqa: BLE001 - NVML errors are answers to record
            calls[key] = _error_record(exc)
    return calls


def _mig_devices(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    out = []
    try:
        count = _call(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle)
    except Exception:  # noqa: BLE001
        return out
    for i in range(count):
        try:
            mig = _call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        except Exception:  # noqa: BLE001 - empty slot
            continue
        entry: dict[str, Any] = {"index": i}
        for key, fn_name in (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName")):
            try:
                entry[key] = _text(_call(nvml, fn_name, mig))
            except Exception as exc:  # noqa: BLE001
                entry[key] = _error_record(exc)
        try:
            m = _call(nvml, "nvmlDeviceGetMemoryInfo", mig)
            entry["memory_info"] = {"total": m.total, "used": m.used, "free": m.free}
        except Exception as exc:  # noqa: BLE001
            entry["memory_info"] = _error_record(exc)
        out.append(entry)
    return out


def load_nvml() -> Any:
    return importlib.import_module("pynvml")


def collect(nvml: Any = None) -> dict[str, Any]:
    """Every NVML answer for every device, or the error that stopped NVML as a whole."""
    try:
        nvml = nvml or load_nvml()
    except ImportError as exc:
        return {"status": "error", "error": "ModuleNotFound", "message": str(exc)}
    raw: dict[str, Any] = {"status": "ok"}
    with _LOCK:
        try:
            nvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001
            return {"status": "error", **_error_record(exc)}
        try:
            for key, fn_name in (
                ("driver_version", "nvmlSystemGetDriverVersion"),
                ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"),
                ("nvml_version", "nvmlSystemGetNVMLVersion"),
            ):
                try:
                    raw[key] = _text(_call(nvml, fn_name))
                except Exception as exc:  # noqa: BLE001
                    raw[key] = _error_record(exc)
            try:
                count = nvml.nvmlDeviceGetCount()
            except Exception as exc:  # noqa: BLE001
                raw["devices"] = _error_record(exc)
                return raw
            devices = []
            for i in range(count):
                try:
                    handle = nvml.nvmlDeviceGetHandleByIndex(i)
                except Exception as exc:  # noqa: BLE001 - a lost GPU costs only itself
                    devices.append({"index": i, "handle_error": _error_record(exc)})
                    continue
                calls = _device_calls(nvml, handle)
                mig = calls.get("mig_mode")
                entry = {"index": i, "calls": calls}
                if isinstance(mig, list) and mig and mig[0] == 1:
                    entry["mig_devices"] = _mig_devices(nvml, handle)
                devices.append(entry)
            raw["devices"] = devices
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass
    return raw


class Telemetry:
    """Polls the fast-changing NVML fields (clocks, power, temperature, utilization) for the TUI.

    NVML is initialised once, lazily; a poll never raises: a failing device or field is recorded
    as an error value, like everything else the doctor reads.
    """

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._handles: list[Any] | None = None
        self.error: str | None = None

    def _init(self) -> None:
        try:
            self._nvml = self._nvml or load_nvml()
            self._nvml.nvmlInit()
            self._handles = [
                self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self._nvml.nvmlDeviceGetCount())
            ]
        except Exception as exc:  # noqa: BLE001
            self._handles = []
            self.error = f"{_error_name(exc)}: {exc}"

    def poll(self) -> list[dict[str, Any]]:
        """One sample per NVML device: {index, calls: {...}}."""
        with _LOCK:
            if self._handles is None:
                self._init()
            return [
                {"index": i, "calls": _device_calls(self._nvml, h, TELEMETRY_KEYS)}
                for i, h in enumerate(self._handles or [])
            ]

    def close(self) -> None:
        with _LOCK:
            if self._handles:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # noqa: BLE001
                    pass
            self._handles = None
