"""AMD GPUs: amdsmi (extra ``rocm``) when present, KFD sysfs topology always (it needs no ROCm user space).

KFD lists CPU and GPU agents as topology nodes; GPU nodes have ``simd_count > 0``. amdsmi prints to
stdout when ROCm is absent, so its import runs with file descriptors 1 and 2 silenced.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
from pathlib import Path
from typing import Any

from ..report import AmdGpu, AmdSection, FieldSet

KFD_TOPOLOGY = "/sys/class/kfd/kfd/topology"

# PCI device id -> market name, for when amdsmi is absent (marked table:pci-id).
MARKET_NAMES = {
    0x66A0: "AMD Instinct MI50/MI60", 0x66A1: "AMD Instinct MI50/MI60", 0x738C: "AMD Instinct MI100",
    0x7408: "AMD Instinct MI250X", 0x740C: "AMD Instinct MI250X/MI250", 0x740F: "AMD Instinct MI210",
    0x74A0: "AMD Instinct MI300A", 0x74A1: "AMD Instinct MI300X", 0x74A5: "AMD Instinct MI325X",
    0x74A9: "AMD Instinct MI300X HF", 0x73BF: "AMD Radeon RX 6800/6900 XT", 0x744C: "AMD Radeon RX 7900 XTX/XT",
    0x7448: "AMD Radeon Pro W7900", 0x73A1: "AMD Radeon Pro V620",
}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def collect_kfd(root: str = KFD_TOPOLOGY) -> dict[str, Any]:
    if not os.path.isdir(root):
        return {"status": "error", "error": "NoKFD",
                "message": f"no {root} (no amdgpu kernel driver loaded, or /dev/kfd not passed to this container)"}
    nodes = {}
    for node_dir in sorted(glob.glob(f"{root}/nodes/*"), key=lambda p: int(os.path.basename(p) or 0)):
        banks = [_read(p) for p in sorted(glob.glob(f"{node_dir}/mem_banks/*/properties"))]
        nodes[os.path.basename(node_dir)] = {
            "properties": _read(f"{node_dir}/properties"),
            "name": (_read(f"{node_dir}/name") or "").strip() or None,
            "mem_banks": [b for b in banks if b is not None],
        }
    return {
        "status": "ok",
        "nodes": nodes,
        "driver_version": (_read("/sys/module/amdgpu/version") or "").strip() or None,
    }


@contextlib.contextmanager
def _silenced_fds():
    """amdsmi writes to the C-level stdout/stderr on import and init when ROCm is missing."""
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def collect_amdsmi() -> dict[str, Any]:
    if importlib.util.find_spec("amdsmi") is None:
        return {"status": "error", "error": "ModuleNotFound", "message": "amdsmi is not installed (extra 'rocm')"}
    try:
        with _silenced_fds():
            import amdsmi

            amdsmi.amdsmi_init()
        try:
            devices = []
            for handle in amdsmi.amdsmi_get_processor_handles():
                entry: dict[str, Any] = {}
                for key, fn in (
                    ("asic", "amdsmi_get_gpu_asic_info"),
                    ("driver", "amdsmi_get_gpu_driver_info"),
                    ("vram", "amdsmi_get_gpu_vram_info"),
                    ("bdf", "amdsmi_get_gpu_device_bdf"),
                ):
                    try:
                        value = getattr(amdsmi, fn)(handle)
                        entry[key] = value if isinstance(value, (dict, str)) else str(value)
                    except Exception as exc:  # noqa: BLE001
                        entry[key] = {"error": type(exc).__name__, "message": str(exc)}
                devices.append(entry)
        finally:
            amdsmi.amdsmi_shut_down()
        return {"status": "ok", "devices": devices}
    except Exception as exc:  # noqa: BLE001
        return {"status": "error", "error": type(exc).__name__, "message": str(exc)}


def collect() -> dict[str, Any]:
    kfd = collect_kfd()
    gpu_nodes = any(parse_properties(n.get("properties")).get("simd_count", 0) > 0
                    for n in (kfd.get("nodes") or {}).values())
    # amdsmi is asked only where KFD shows a GPU: its import prints, and silencing it means borrowing
    # the process's stdout for a moment, which no other machine should pay for.
    smi = collect_amdsmi() if gpu_nodes else {"status": "skipped", "message": "no AMD GPU in KFD"}
    return {"kfd": kfd, "amdsmi": smi, "dev_kfd": os.path.exists("/dev/kfd")}


def parse_properties(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def gfx_target(version: int) -> str:
    """KFD gfx_target_version -> gfx name: minor and stepping are hex digits (90010 -> gfx90a)."""
    major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def interpret(raw: dict[str, Any] | None) -> AmdSection:
    raw = raw or {}
    if raw.get("status") == "error":  # the source itself failed or timed out
        return AmdSection(devices=[], reason=raw.get("message") or raw.get("error"))
    kfd = raw.get("kfd") or {}
    smi = raw.get("amdsmi") or {}
    if kfd.get("status") != "ok":
        reason = kfd.get("message") or "KFD not collected"
        return AmdSection(devices=[], reason=reason)
    smi_devices = smi.get("devices") if smi.get("status") == "ok" else None
    devices = []
    for node_id, node in (kfd.get("nodes") or {}).items():
        props = parse_properties(node.get("properties"))
        if props.get("simd_count", 0) <= 0:
            continue  # a CPU agent
        devices.append(_device(int(node_id), node, props, kfd.get("driver_version"), smi_devices, len(devices)))
    reason = None if devices else "KFD lists no GPU nodes"
    return AmdSection(devices=devices, reason=reason, sources={"devices": "kfd sysfs"})


def _bdf_location(bdf: Any) -> int | None:
    """amdsmi's "0000:c3:00.0" -> KFD's location_id (bus << 8 | device << 3 | function)."""
    try:
        _, bus, devfn = str(bdf).split(":")
        dev, fn = devfn.split(".")
        return int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)
    except (ValueError, AttributeError):
        return None


def _smi_for(props: dict[str, int], smi_devices: list[dict[str, Any]] | None, gpu_index: int) -> dict[str, Any] | None:
    if not smi_devices:
        return None
    loc = props.get("location_id")
    for d in smi_devices:
        if loc is not None and _bdf_location(d.get("bdf")) == loc:
            return d
    return smi_devices[gpu_index] if gpu_index < len(smi_devices) and loc is None else None


def _device(node_id: int, node: dict[str, Any], props: dict[str, int], driver: str | None,
            smi_devices: list[dict[str, Any]] | None, gpu_index: int) -> AmdGpu:
    fs = FieldSet()
    src = "kfd sysfs"
    fs.put("node", node_id, src)
    target = props.get("gfx_target_version")
    fs.put("gfx_target", gfx_target(target) if target else None, src, "no gfx_target_version")
    simd, per_cu = props.get("simd_count"), props.get("simd_per_cu")
    fs.put("compute_units", simd // per_cu if simd and per_cu else None, src)
    fs.put("simd_per_cu", per_cu, src)
    fs.put("wavefront_size", props.get("wave_front_size"), src)
    lds = props.get("lds_size_in_kb")
    fs.put("lds_bytes_per_workgroup", lds * 1024 if lds else None, src)
    fs.put("max_engine_clock_mhz", props.get("max_engine_clk_fcompute"), src)
    device_id = props.get("device_id")
    fs.put("pci_device_id", f"0x{device_id:04x}" if device_id else None, src)
    banks = [parse_properties(b) for b in node.get("mem_banks") or []]
    vram = sum(b.get("size_in_bytes", 0) for b in banks if b.get("heap_type") in (1, 2))
    fs.put("vram_bytes", vram or props.get("local_mem_size") or None, src, "no local memory banks in KFD")
    fs.put("driver_version", driver, "/sys/module/amdgpu/version", "amdgpu module version not exposed")
    smi = _smi_for(props, smi_devices, gpu_index)
    asic = (smi or {}).get("asic")
    if isinstance(asic, dict) and asic.get("market_name"):
        fs.put("name", asic["market_name"], "amdsmi")
    else:
        fs.put("name", MARKET_NAMES.get(device_id or -1), "table:pci-id",
               "amdsmi unavailable and this PCI id is not in the table")
    drv = (smi or {}).get("driver")
    if isinstance(drv, dict) and drv.get("driver_version"):
        fs.put("driver_version", drv["driver_version"], "amdsmi")
    return fs.build(AmdGpu)
