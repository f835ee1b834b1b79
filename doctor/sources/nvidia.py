"""Joins NVML's answers with cuda-core's (by UUID), fills the rest from the compute-capability table,
and applies CUDA_VISIBLE_DEVICES the way the CUDA runtime does.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ..gpu_specs import PRODUCTS, spec_for
from ..report import FieldSet, NvidiaGpu, NvidiaSection

# NVML clocks-event (throttle) reason bits, nvml.h
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the clocks are held below what the workload asks for.
THROTTLING = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}

NVML_MISSING_REASONS = {
    "LibraryNotFound": "no NVML library (libnvidia-ml.so): no NVIDIA driver here, or a container started without GPUs",
    "DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
    "LibRmVersionMismatch": "the NVML library and the loaded kernel driver are different versions",
    "NoPermission": "no permission to open the NVIDIA device files",
    "ModuleNotFound": "nvidia-ml-py is not installed",
}


def _ok(value: Any) -> bool:
    return value is not None and not (isinstance(value, dict) and "error" in value)


def _why(value: Any, what: str) -> str:
    if isinstance(value, dict) and "error" in value:
        err = value["error"]
        return f"{what}: NVML {'does not support it on this device' if err == 'NotSupported' else err}"
    return f"{what}: not reported"


def _pair(fs: Any, answer: Any, call: str, fields: dict[str, str]) -> None:
    """Fields read from one NVML call's answer (a dict), or each marked missing with the call's reason."""
    for field, key in fields.items():
        if _ok(answer):
            fs.put(field, answer[key], "nvml")
        else:
            fs.miss(field, _why(answer, call))


def _norm_uuid(uuid: str | None) -> str:
    u = (uuid or "").strip().lower()
    for prefix in ("gpu-", "mig-"):
        if u.startswith(prefix):
            u = u[len(prefix):]
    return u


def decode_throttle(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def _format_cuda_version(v: Any) -> str | None:
    if not isinstance(v, int):
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def resolve_visible(nvml_devices: list[dict[str, Any]], cvd: str | None) -> list[tuple[dict[str, Any], str | None]]:
    """NVML devices in CUDA's order under CUDA_VISIBLE_DEVICES: [(device, MIG UUID or None)].

    Like the CUDA runtime: entries are indices, GPU UUIDs (any unique prefix) or MIG UUIDs; parsing
    stops at the first entry that names no device; an empty value hides every device.
    """
    if cvd is None:
        return [(d, None) for d in nvml_devices]
    picked: list[tuple[dict[str, Any], str | None]] = []
    seen: set[int] = set()
    for token in (t.strip() for t in cvd.split(",")):
        match: tuple[dict[str, Any], str | None] | None = None
        if token.isdigit():
            i = int(token)
            match = (nvml_devices[i], None) if i < len(nvml_devices) else None
        elif token.upper().startswith("MIG-"):
            for d in nvml_devices:
                for m in d.get("mig_devices") or []:
                    if _norm_uuid(m.get("uuid") if isinstance(m.get("uuid"), str) else None) == _norm_uuid(token):
                        match = (d, m["uuid"])
        elif token.upper().startswith("GPU-"):  # CUDA takes UUIDs only with their prefix
            want = _norm_uuid(token)
            hits = [d for d in nvml_devices if want and _norm_uuid(_uuid_of(d)).startswith(want)]
            match = (hits[0], None) if len(hits) == 1 else None
        if match is None or (id(match[0]) in seen and match[1] is None):
            break
        seen.add(id(match[0]))
        picked.append(match)
    return picked


def cuda_order(nvml_devices: list[dict[str, Any]], cuda: dict[str, Any] | None,
               env: dict[str, Any]) -> tuple[list[tuple[dict[str, Any], str | None]], str]:
    """The devices a CUDA process sees, in CUDA's order: [(NVML device, MIG UUID or None)], and how
    that order is known. A live cuda-core reading is CUDA's own enumeration (CUDA_VISIBLE_DEVICES and
    CUDA_DEVICE_ORDER applied by the driver); otherwise NVML's PCI order is exact only under
    CUDA_DEVICE_ORDER=PCI_BUS_ID or when all GPUs are alike (CUDA's default is fastest first)."""
    if cuda is not None:
        by_uuid: dict[str, tuple[dict[str, Any], str | None]] = {}
        for d in nvml_devices:
            by_uuid[_norm_uuid(_uuid_of(d))] = (d, None)
            for m in d.get("mig_devices") or []:
                if isinstance(m.get("uuid"), str):
                    by_uuid[_norm_uuid(m["uuid"])] = (d, m["uuid"])
        entries = sorted(cuda.get("devices") or [], key=lambda e: e.get("ordinal", 0))
        picked = [by_uuid[_norm_uuid(e["uuid"])] for e in entries if _norm_uuid(e.get("uuid")) in by_uuid]
        if len(picked) == len(entries):
            return picked, "cuda-core enumeration"
    visible = resolve_visible(nvml_devices, env.get("CUDA_VISIBLE_DEVICES"))
    kinds = {((d.get("calls") or {}).get("name"), str((d.get("calls") or {}).get("cuda_compute_capability")))
             for d in nvml_devices}
    if env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" or len(kinds) <= 1:
        return visible, "CUDA_VISIBLE_DEVICES order (PCI order)"
    return visible, ("CUDA_VISIBLE_DEVICES order, assuming PCI order: CUDA's default is fastest first; "
                     "set CUDA_DEVICE_ORDER=PCI_BUS_ID or install tracea[cuda] to be sure")


def _uuid_of(d: dict[str, Any]) -> str | None:
    u = (d.get("calls") or {}).get("uuid")
    return u if isinstance(u, str) else None


def interpret(nvml: dict[str, Any] | None, cuda: dict[str, Any] | None, env: dict[str, Any]) -> NvidiaSection:
    top = FieldSet()
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if nvml is None or nvml.get("status") != "ok":
        err = (nvml or {}).get("error", "not collected")
        reason = NVML_MISSING_REASONS.get(err, f"NVML failed: {err} {(nvml or {}).get('message', '')}".strip())
        return NvidiaSection(devices=[], reason=reason, cuda_visible_devices=cvd)

    top.put("driver_version", nvml.get("driver_version") if _ok(nvml.get("driver_version")) else None, "nvml")
    top.put("cuda_driver_version", _format_cuda_version(nvml.get("cuda_driver_version")), "nvml")
    top.put("nvml_version", nvml.get("nvml_version") if _ok(nvml.get("nvml_version")) else None, "nvml")
    raw_devices = nvml.get("devices")
    if not isinstance(raw_devices, list):
        return top.build(NvidiaSection, devices=[], reason=_why(raw_devices, "device count"),
                         cuda_visible_devices=cvd)

    cuda_by_uuid: dict[str, dict[str, Any]] = {}
    cuda_ok = bool(cuda) and cuda.get("status") == "ok"
    if cuda_ok:
        for entry in cuda.get("devices") or []:
            if entry.get("uuid"):
                cuda_by_uuid[_norm_uuid(entry["uuid"])] = entry
    cuda_reason = None if cuda_ok else ((cuda or {}).get("message") or "cuda-core not collected")
    cache = (cuda or {}).get("cache") or {}
    cuda_source = f"cuda-core (cached {cache.get('saved_at')})" if cache.get("hit") else "cuda-core"

    visible, order_source = cuda_order(raw_devices, cuda if cuda_ok and not cache.get("hit") else None, env)
    devices = [
        _device(d, mig_uuid, cuda_index, cuda_by_uuid, cuda_reason, cuda_source, order_source)
        for cuda_index, (d, mig_uuid) in enumerate(visible)
    ]
    reason = None
    if not devices:
        reason = (
            f"CUDA_VISIBLE_DEVICES={cvd!r} hides all {len(raw_devices)} NVIDIA devices"
            if raw_devices else "NVML found no NVIDIA devices"
        )
    return top.build(
        NvidiaSection,
        devices=devices,
        reason=reason,
        cuda_visible_devices=cvd,
        hidden_by_cuda_visible_devices=len(raw_devices) - len({id(d) for d, _ in visible}),
    )


# cuda-core device attribute behind each field (cuda.core's DeviceProperties names)
CUDA_ATTRIBUTES = {
    "sm_count": "multiprocessor_count",
    "shared_memory_per_block_bytes": "max_shared_memory_per_block",
    "shared_memory_per_block_optin_bytes": "max_shared_memory_per_block_optin",
    "shared_memory_per_sm_bytes": "max_shared_memory_per_multiprocessor",
    "registers_per_sm": "max_registers_per_multiprocessor",
    "max_threads_per_sm": "max_threads_per_multiprocessor",
    "l2_cache_bytes": "l2_cache_size",
    "warp_size": "warp_size",
    "cluster_launch": "cluster_launch",
    "tma": "tensor_map_access_supported",
}


def _device(
    d: dict[str, Any],
    mig_uuid: str | None,
    cuda_index: int,
    cuda_by_uuid: dict[str, dict[str, Any]],
    cuda_reason: str | None,
    cuda_source: str = "cuda-core",
    order_source: str = "CUDA_VISIBLE_DEVICES order",
) -> NvidiaGpu:
    """One device as CUDA sees it: NVML's readings, the compute-capability table's facts, cuda-core's
    attributes, and the table again for the attributes cuda-core could not give."""
    fs = FieldSet()
    fs.put("cuda_index", cuda_index, order_source)
    fs.put("nvml_index", d.get("index"), "nvml")
    if "handle_error" in d:  # a GPU NVML cannot open (fallen off the bus, Xid 79): every field says so
        why = _why(d["handle_error"], "device handle")
        for f in dataclasses.fields(NvidiaGpu):
            if f.name not in ("cuda_index", "nvml_index", "sources", "unavailable"):
                fs.miss(f.name, why)
        return fs.build(NvidiaGpu)
    calls = d.get("calls") or {}
    cc = _nvml_identity(fs, d, calls, mig_uuid)
    _nvml_readings(fs, d, calls)
    spec = spec_for(cc)  # type: ignore[arg-type]
    table = f"table:cc{cc[0]}.{cc[1]}" if cc else "table"
    _architecture(fs, spec, cc, table)
    # cuda-core attributes, joined by UUID (for a MIG instance, CUDA reports the MIG UUID)
    _cuda_attributes(fs, cuda_by_uuid.get(_norm_uuid(mig_uuid or fs.values.get("uuid"))), cuda_source)
    _table_attributes(fs, spec, table, calls.get("num_gpu_cores"), mig_uuid, cuda_reason)
    return fs.build(NvidiaGpu)


def _nvml(fs: FieldSet, calls: dict[str, Any], key: str, field: str, convert: Any = lambda v: v) -> Any:
    """``field`` from NVML's answer to ``key`` (converted), or missing with NVML's reason; the raw answer
    or None."""
    value = calls.get(key)
    if _ok(value):
        fs.put(field, convert(value), "nvml")
        return value
    fs.miss(field, _why(value, key))
    return None


def _nvml_identity(fs: FieldSet, d: dict[str, Any], calls: dict[str, Any],
                   mig_uuid: str | None) -> tuple[int, int] | None:
    """Name, UUID, PCI bus, compute capability and memory (a MIG instance's own where one is named);
    returns the compute capability."""
    nv = functools.partial(_nvml, fs, calls)
    nv("name", "name")
    nv("uuid", "uuid")
    mig = next((m for m in d.get("mig_devices") or [] if m.get("uuid") == mig_uuid), None) if mig_uuid else None
    if mig_uuid:
        fs.put("uuid", mig_uuid, "nvml (MIG instance)")
        if isinstance(mig.get("name"), str):
            fs.put("name", mig["name"], "nvml (MIG instance)")
    nv("pci_bus_id", "pci_bus_id")
    cc_raw = nv("cuda_compute_capability", "compute_capability", lambda v: f"{v[0]}.{v[1]}")
    mem = (mig or {}).get("memory_info") if mig_uuid else calls.get("memory_info")
    _pair(fs, mem, "memory_info", {"memory_total_bytes": "total", "memory_used_bytes": "used"})
    return tuple(cc_raw) if cc_raw else None


def _nvml_readings(fs: FieldSet, d: dict[str, Any], calls: dict[str, Any]) -> None:
    """Bus width, clocks, power, temperature, utilization, PCIe link, MIG, persistence and clock events."""
    nv = functools.partial(_nvml, fs, calls)
    nv("memory_bus_width", "memory_bus_width_bits")
    nv("clock_sm_mhz", "sm_clock_mhz")
    nv("max_clock_sm_mhz", "sm_clock_max_mhz")
    nv("clock_mem_mhz", "memory_clock_mhz")
    nv("max_clock_mem_mhz", "memory_clock_max_mhz")
    nv("power_usage_mw", "power_draw_w", lambda v: v / 1000)
    nv("power_limit_mw", "power_limit_w", lambda v: v / 1000)
    nv("temperature_c", "temperature_c")
    _pair(fs, calls.get("utilization"), "utilization", {"utilization_gpu_percent": "gpu",
                                                         "utilization_memory_percent": "memory"})
    nv("pcie_gen", "pcie_generation")
    nv("pcie_gen_max", "pcie_generation_max")
    nv("pcie_width", "pcie_width")
    nv("pcie_width_max", "pcie_width_max")
    nv("mig_mode", "mig_mode", lambda v: "enabled" if v[0] == 1 else "disabled")
    migs = d.get("mig_devices")
    if migs is not None:
        fs.put("mig_devices", [m["uuid"] for m in migs if isinstance(m.get("uuid"), str)], "nvml")
    else:
        fs.miss("mig_devices", "MIG is not enabled")
    nv("persistence_mode", "persistence_mode", lambda v: v == 1)
    nv("clocks_event_reasons", "throttle_reasons", decode_throttle)


def _architecture(fs: FieldSet, spec: Any, cc: tuple[int, int] | None, table: str) -> None:
    """Architecture, tensor-core generation and precisions from the compute-capability table."""
    if spec:
        fs.put("architecture", spec.architecture, table)
        fs.put("tensor_core_generation", spec.tensor_core_generation, table)
        fs.put("precisions", list(spec.precisions), table)
    else:
        why = "unknown compute capability" if cc else "no compute capability"
        for key in ("architecture", "tensor_core_generation", "precisions"):
            fs.miss(key, why)


def _cuda_attributes(fs: FieldSet, cu: dict[str, Any] | None, cuda_source: str) -> None:
    """The attributes cuda-core read for this device (``cu``: its entry, or None)."""
    attrs = (cu or {}).get("attributes") or {}
    for field, attr in CUDA_ATTRIBUTES.items():
        value = attrs.get(attr)
        if value is not None and not isinstance(value, dict):
            fs.put(field, bool(value) if field in ("cluster_launch", "tma") else int(value), cuda_source)


def _table_attributes(fs: FieldSet, spec: Any, table: str, cores: Any, mig_uuid: str | None,
                      cuda_reason: str | None) -> None:
    """The table for what cuda-core could not give, and a reason for what neither gives."""
    # Whole-GPU figures (SMs, L2) never stand in for a MIG slice, nor for a GPU in MIG mode, where CUDA
    # runs only on the slices.
    why_table = f"cuda-core unavailable ({cuda_reason}); " if cuda_reason else ""
    in_mig = bool(mig_uuid) or fs.values.get("mig_mode") == "enabled"
    product = {} if in_mig else PRODUCTS.get(fs.values.get("name") or "", {})
    if in_mig:
        for field in ("sm_count", "l2_cache_bytes"):
            if not fs.has(field):
                fs.miss(field, "a MIG slice's SMs and L2 are read only through cuda-core (pip install 'tracea[cuda]')"
                        if mig_uuid else "GPU in MIG mode: CUDA runs on its MIG instances; name one in "
                        "CUDA_VISIBLE_DEVICES=MIG-<uuid>")
    if spec:
        if not fs.has("sm_count") and _ok(cores) and not in_mig:
            fs.put("sm_count", int(cores) // spec.cores_per_sm, f"nvml cores / {table} cores per SM")
        if not in_mig:
            fs.setdefault("sm_count", product.get("sm_count"), f"table:{fs.values.get('name')}")
        fs.setdefault("shared_memory_per_block_bytes", 48 * 1024, table)
        fs.setdefault("shared_memory_per_block_optin_bytes", spec.shared_memory_per_block_optin_bytes, table)
        fs.setdefault("shared_memory_per_sm_bytes", spec.shared_memory_per_sm_bytes, table)
        fs.setdefault("registers_per_sm", spec.registers_per_sm, table)
        fs.setdefault("max_threads_per_sm", spec.max_threads_per_sm, table)
        fs.setdefault("warp_size", 32, table)
        fs.setdefault("cluster_launch", spec.cluster_launch, table)
        fs.setdefault("tma", spec.tma, table)
    if not in_mig:
        fs.setdefault("l2_cache_bytes", product.get("l2_cache_bytes"), f"table:{fs.values.get('name')}",
                      f"{why_table}L2 size varies by product and this one is not in the table")
    for field in CUDA_ATTRIBUTES:
        if not fs.has(field) and field not in fs.unavailable:
            fs.miss(field, f"{why_table}compute capability {fs.values.get('compute_capability')} not in the table")
