"""Device attributes NVML lacks (SM count, shared memory, registers, L2, clusters, TMA), read through
cuda-core (extra ``cuda``). Recorded raw, keyed by the device UUID so they join NVML's answers.
"""

from __future__ import annotations

from typing import Any

# cuda.core DeviceProperties attribute names recorded in the snapshot.
ATTRIBUTES = (
    "multiprocessor_count",
    "max_shared_memory_per_block",
    "max_shared_memory_per_block_optin",
    "max_shared_memory_per_multiprocessor",
    "reserved_shared_memory_per_block",
    "max_registers_per_block",
    "max_registers_per_multiprocessor",
    "max_threads_per_block",
    "max_threads_per_multiprocessor",
    "max_blocks_per_multiprocessor",
    "l2_cache_size",
    "warp_size",
    "cluster_launch",
    "tensor_map_access_supported",
    "clock_rate",
    "memory_clock_rate",
    "global_memory_bus_width",
    "compute_capability_major",
    "compute_capability_minor",
)


def _import_core():
    try:
        import cuda.core as core

        _ = core.Device  # cuda-core >= 0.4 exports it at the top level
        return core
    except (ImportError, AttributeError):
        import cuda.core.experimental as core  # cuda-core < 0.4

        return core


def _num_devices(core: Any) -> int:
    system = getattr(core, "system", None)
    for name in ("get_num_devices", "num_devices"):
        value = getattr(system, name, None)
        if value is not None:
            return int(value() if callable(value) else value)
    from cuda.bindings import driver

    err, count = driver.cuDeviceGetCount()
    if int(err) != 0:
        raise RuntimeError(f"cuDeviceGetCount failed: {err}")
    return int(count)


def _driver_version() -> int | None:
    try:
        from cuda.bindings import driver

        driver.cuInit(0)
        err, version = driver.cuDriverGetVersion()
        return int(version) if int(err) == 0 else None
    except Exception:  # noqa: BLE001
        return None


def collect() -> dict[str, Any]:
    try:
        core = _import_core()
    except ImportError as exc:
        return {"status": "error", "error": "ModuleNotFound",
                "message": f"cuda-core is not installed ({exc}); pip install 'tracea[cuda]'"}
    raw: dict[str, Any] = {"status": "ok", "cuda_core_version": getattr(core, "__version__", None)}
    try:
        count = _num_devices(core)
    except Exception as exc:  # noqa: BLE001
        return {"status": "error", "error": type(exc).__name__, "message": str(exc)}
    raw["driver_version"] = _driver_version()
    devices = []
    for ordinal in range(count):
        entry: dict[str, Any] = {"ordinal": ordinal}
        try:
            dev = core.Device(ordinal)
            entry["uuid"] = str(dev.uuid)
            entry["name"] = dev.name
            props = dev.properties
            attrs: dict[str, Any] = {}
            for name in ATTRIBUTES:
                try:
                    value = getattr(props, name)
                    attrs[name] = value if isinstance(value, (int, float, str)) else int(value)
                except Exception as exc:  # noqa: BLE001 - one attribute costs only itself
                    attrs[name] = {"error": type(exc).__name__, "message": str(exc)}
            entry["attributes"] = attrs
        except Exception as exc:  # noqa: BLE001
            entry["error"] = {"error": type(exc).__name__, "message": str(exc)}
        devices.append(entry)
    raw["devices"] = devices
    return raw
