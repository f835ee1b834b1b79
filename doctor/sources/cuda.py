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


# ------------------------------------------------------------------------------------------------
# Static attributes cache. Importing cuda-core and cuInit cost most of a second on a GPU machine,
# and the attributes read here never change for one device under one driver. So a complete, error-
# free reading is kept, keyed by the driver, cuda-core, cuda-bindings and Tracea versions and the
# attribute list, and reused only when it covers every device CUDA can see now (each GPU not in MIG
# mode and each MIG instance, by UUID). A new driver or package, a swapped GPU or a new MIG layout is
# a miss, never a stale hit. `tracea doctor --no-cache` reads live and refreshes the cache.

CACHE_SCHEMA = 1


def cache_path() -> str:
    import os

    home = os.environ.get("TRACEA_HOME")
    if home:
        return os.path.join(home, "cache", "doctor-cuda-attributes.json")
    from platformdirs import user_cache_dir

    return os.path.join(user_cache_dir("tracea", appauthor=False), "doctor-cuda-attributes.json")


def _versions() -> tuple[str | None, str | None, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("cuda-core", "cuda-bindings", "tracea"):
        try:
            out.append(version(name))
        except PackageNotFoundError:
            out.append(None)
    return out[0], out[1], out[2]


def _norm(uuid: str) -> str:
    u = uuid.strip().lower()
    return u.split("-", 1)[1] if u.startswith(("gpu-", "mig-")) else u


def nvml_uuids(nvml_raw: dict[str, Any] | None) -> set[str] | None:
    """Every UUID NVML reports (GPUs and MIG instances), or None when NVML gave no device list."""
    devices = (nvml_raw or {}).get("devices") if (nvml_raw or {}).get("status") == "ok" else None
    if not isinstance(devices, list):
        return None
    uuids = set()
    for d in devices:
        u = (d.get("calls") or {}).get("uuid")
        if not isinstance(u, str):
            return None  # a device we cannot name cannot be matched: read live
        uuids.add(_norm(u))
        for m in d.get("mig_devices") or []:
            if not isinstance(m.get("uuid"), str):
                return None
            uuids.add(_norm(m["uuid"]))
    return uuids


def _key(nvml_raw: dict[str, Any]) -> str | None:
    """Everything the cached answers depend on besides the GPUs themselves."""
    import hashlib

    driver = nvml_raw.get("driver_version")
    core, bindings, tracea = _versions()
    if not isinstance(driver, str) or core is None:
        return None
    attrs = hashlib.sha256(",".join(ATTRIBUTES).encode()).hexdigest()[:8]
    return f"schema {CACHE_SCHEMA} | driver {driver} | cuda-core {core} | cuda-bindings {bindings} | tracea {tracea} | attributes {attrs}"


def _needed(nvml_raw: dict[str, Any]) -> set[str]:
    """The UUIDs CUDA may enumerate: each GPU not in MIG mode, and each MIG instance."""
    needed = set()
    for d in nvml_raw["devices"]:
        migs = d.get("mig_devices") or []
        if migs:
            needed.update(_norm(m["uuid"]) for m in migs)
        else:
            needed.add(_norm(d["calls"]["uuid"]))
    return needed


def cache_lookup(nvml_raw: dict[str, Any] | None, path: str) -> dict[str, Any] | None:
    """The cached raw answers covering every device CUDA can see now, or None: a miss, never an error
    (a missing, unreadable, corrupt or foreign cache file is a miss)."""
    import json

    try:
        uuids, key = nvml_uuids(nvml_raw), _key(nvml_raw or {})
        if not uuids or key is None:
            return None
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") != CACHE_SCHEMA:
            return None
        entry = doc["entries"][key]
        devices = [dict(d, ordinal=None) for d in entry["raw"]["devices"] if _norm(d.get("uuid", "")) in uuids]
        if not _needed(nvml_raw) <= {_norm(d["uuid"]) for d in devices}:  # type: ignore[arg-type]
            return None  # a new GPU, or a new MIG layout
        return {**entry["raw"], "devices": devices,
                "cache": {"hit": True, "saved_at": entry.get("saved_at"), "path": path}}
    except Exception:  # noqa: BLE001 - any malformed cache is a miss
        return None


def _clean(cuda_raw: dict[str, Any]) -> bool:
    devices = cuda_raw.get("devices")
    if cuda_raw.get("status") != "ok" or not devices:
        return False
    return all("error" not in d and d.get("uuid") and not any(isinstance(v, dict) for v in d.get("attributes", {}).values())
               for d in devices)


def cache_store(nvml_raw: dict[str, Any] | None, cuda_raw: dict[str, Any], path: str) -> None:
    """Merge a complete, error-free live reading into the cache, atomically; a reading with any error
    is not kept, and a cache that cannot be written costs only the speed-up."""
    import datetime as dt
    import json
    import os
    import tempfile

    key = _key(nvml_raw or {}) if isinstance(nvml_raw, dict) else None
    if key is None or not _clean(cuda_raw):
        return
    try:
        try:
            with open(path) as f:
                doc = json.load(f)
            old = doc["entries"][key]["raw"]["devices"] if doc.get("schema") == CACHE_SCHEMA else []
            old = [d for d in old if isinstance(d, dict) and d.get("uuid")]
        except Exception:  # noqa: BLE001 - absent or malformed: start afresh
            old = []
        merged = {d["uuid"]: d for d in old}
        merged.update({d["uuid"]: dict(d, ordinal=None) for d in cuda_raw["devices"]})
        raw = {k: v for k, v in cuda_raw.items() if k != "cache"}
        raw["devices"] = list(merged.values())
        doc = {"schema": CACHE_SCHEMA,
               "entries": {key: {"saved_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "raw": raw}}}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".cuda-attributes.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except Exception:  # noqa: BLE001 - a read-only or odd home costs only the speed-up
        pass
