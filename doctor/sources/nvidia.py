"""Joins NVML's answers with cuda-core's (by UUID), fills the rest from the compute-capability table,
and applies CUDA_VISIBLE_DEVICES the way the CUDA runtime does.
"""

from __future__ import annotations

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
        elif token:
            want = _norm_uuid(token)
            hits = [d for d in nvml_devices if want and _norm_uuid(_uuid_of(d)).startswith(want)]
            match = (hits[0], None) if len(hits) == 1 else None
        if match is None or (id(match[0]) in seen and match[1] is None):
            break
        seen.add(id(match[0]))
        picked.append(match)
    return picked


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

    visible = resolve_visible(raw_devices, cvd)
    devices = [
        _device(d, mig_uuid, cuda_index, cuda_by_uuid, cuda_reason, cuda_source)
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


def _device(
    d: dict[str, Any],
    mig_uuid: str | None,
    cuda_index: int,
    cuda_by_uuid: dict[str, dict[str, Any]],
    cuda_reason: str | None,
    cuda_source: str = "cuda-core",
) -> NvidiaGpu:
    fs = FieldSet()
    calls = d.get("calls") or {}
    if "handle_error" in d:
        fs.miss("name", _why(d["handle_error"], "device handle"))
    fs.put("cuda_index", cuda_index, "CUDA_VISIBLE_DEVICES order")
    fs.put("nvml_index", d.get("index"), "nvml")

    def nv(key: str, field: str, convert=lambda v: v) -> Any:
        value = calls.get(key)
        if _ok(value):
            fs.put(field, convert(value), "nvml")
            return value
        fs.miss(field, _why(value, key))
        return None

    nv("name", "name")
    nv("uuid", "uuid")
    if mig_uuid:
        fs.put("uuid", mig_uuid, "nvml (MIG instance named by CUDA_VISIBLE_DEVICES)")
    nv("pci_bus_id", "pci_bus_id")
    cc_raw = nv("cuda_compute_capability", "compute_capability", lambda v: f"{v[0]}.{v[1]}")
    cc = tuple(cc_raw) if cc_raw else None
    mem = calls.get("memory_info")
    if _ok(mem):
        fs.put("memory_total_bytes", mem["total"], "nvml")
        fs.put("memory_used_bytes", mem["used"], "nvml")
    else:
        fs.miss("memory_total_bytes", _why(mem, "memory_info"))
        fs.miss("memory_used_bytes", _why(mem, "memory_info"))
    nv("memory_bus_width", "memory_bus_width_bits")
    nv("clock_sm_mhz", "sm_clock_mhz")
    nv("max_clock_sm_mhz", "sm_clock_max_mhz")
    nv("clock_mem_mhz", "memory_clock_mhz")
    nv("max_clock_mem_mhz", "memory_clock_max_mhz")
    nv("power_usage_mw", "power_draw_w", lambda v: v / 1000)
    nv("power_limit_mw", "power_limit_w", lambda v: v / 1000)
    nv("temperature_c", "temperature_c")
    util = calls.get("utilization")
    if _ok(util):
        fs.put("utilization_gpu_percent", util["gpu"], "nvml")
        fs.put("utilization_memory_percent", util["memory"], "nvml")
    else:
        fs.miss("utilization_gpu_percent", _why(util, "utilization"))
        fs.miss("utilization_memory_percent", _why(util, "utilization"))
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

    spec = spec_for(cc)  # type: ignore[arg-type]
    table = f"table:cc{cc[0]}.{cc[1]}" if cc else "table"
    if spec:
        fs.put("architecture", spec.architecture, table)
        fs.put("tensor_core_generation", spec.tensor_core_generation, table)
        fs.put("precisions", list(spec.precisions), table)
    else:
        why = "unknown compute capability" if cc else "no compute capability"
        for key in ("architecture", "tensor_core_generation", "precisions"):
            fs.miss(key, why)

    # cuda-core attributes, joined by UUID (for a MIG instance, CUDA reports the MIG UUID)
    cu = cuda_by_uuid.get(_norm_uuid(mig_uuid or fs.values.get("uuid")))
    attrs = (cu or {}).get("attributes") or {}
    names = {
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
    for field, attr in names.items():
        value = attrs.get(attr)
        if value is not None and not isinstance(value, dict):
            fs.put(field, bool(value) if field in ("cluster_launch", "tma") else int(value), cuda_source)

    # The table for what cuda-core could not give.
    why_table = f"cuda-core unavailable ({cuda_reason}); " if cuda_reason else ""
    product = PRODUCTS.get(fs.values.get("name") or "", {})
    cores = calls.get("num_gpu_cores")
    if spec:
        if not fs.has("sm_count") and _ok(cores):
            fs.put("sm_count", int(cores) // spec.cores_per_sm, f"nvml cores / {table} cores per SM")
        fs.setdefault("sm_count", product.get("sm_count"), f"table:{fs.values.get('name')}")
        fs.setdefault("shared_memory_per_block_bytes", 48 * 1024, table)
        fs.setdefault("shared_memory_per_block_optin_bytes", spec.shared_memory_per_block_optin_bytes, table)
        fs.setdefault("shared_memory_per_sm_bytes", spec.shared_memory_per_sm_bytes, table)
        fs.setdefault("registers_per_sm", spec.registers_per_sm, table)
        fs.setdefault("max_threads_per_sm", spec.max_threads_per_sm, table)
        fs.setdefault("warp_size", 32, table)
        fs.setdefault("cluster_launch", spec.cluster_launch, table)
        fs.setdefault("tma", spec.tma, table)
    fs.setdefault("l2_cache_bytes", product.get("l2_cache_bytes"), f"table:{fs.values.get('name')}",
                  f"{why_table}L2 size varies by product and this one is not in the table")
    for field in names:
        if not fs.has(field) and field not in fs.unavailable:
            fs.miss(field, f"{why_table}compute capability {fs.values.get('compute_capability')} not in the table")
    return fs.build(NvidiaGpu)
