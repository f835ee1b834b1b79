"""CPU: model, cores, clocks, caches, memory, NUMA and the SIMD ISA.

``collect()`` reads the raw answers (/proc/cpuinfo, /proc/meminfo, sysfs; ``sysctl`` on macOS) into a
JSON-safe dict; ``interpret(raw)`` turns them into a ``CpuInfo`` without touching the machine, so a
snapshot from any host replays here. py-cpuinfo takes about a second, so it is only the last resort
(a platform with neither /proc/cpuinfo nor sysctl).
"""

from __future__ import annotations

import glob
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from ..report import CpuInfo, FieldSet
from .uarch import Uarch, x86_microarchitecture

SYSFS_CPU = "/sys/devices/system/cpu"
SYSFS_NODE = "/sys/devices/system/node"

# /proc/cpuinfo flag -> Tracea's ISA name. Order is the order of the report.
X86_ISA = {
    "sse4_2": "sse4.2",
    "avx": "avx",
    "avx2": "avx2",
    "fma": "fma",
    "f16c": "f16c",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512vl": "avx512vl",
    "avx512_vnni": "avx512vnni",
    "avx512_bf16": "avx512bf16",
    "avx512_fp16": "avx512fp16",
    "amx_tile": "amx-tile",
    "amx_bf16": "amx-bf16",
    "amx_int8": "amx-int8",
}
ARM_ISA = {
    "asimd": "neon",
    "neon": "neon",
    "asimdhp": "fp16",
    "asimddp": "dotprod",
    "bf16": "bf16",
    "i8mm": "i8mm",
    "sve": "sve",
    "sve2": "sve2",
    "sme": "sme",
}
# macOS hw.optional.* keys -> ISA name
DARWIN_ISA = {
    "hw.optional.neon": "neon",
    "hw.optional.AdvSIMD": "neon",
    "hw.optional.arm.FEAT_FP16": "fp16",
    "hw.optional.arm.FEAT_DotProd": "dotprod",
    "hw.optional.arm.FEAT_BF16": "bf16",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
    "hw.optional.arm.FEAT_SME": "sme",
    "hw.optional.sse4_2": "sse4.2",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.f16c": "f16c",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.avx512bw": "avx512bw",
    "hw.optional.avx512vl": "avx512vl",
    "hw.optional.avx512vnni": "avx512vnni",
}
ISA_ORDER = list(dict.fromkeys([*X86_ISA.values(), *ARM_ISA.values()]))

# Arm MIDR implementer -> (vendor, {part -> core name}), for cpuinfo files without "model name".
ARM_PARTS: dict[int, tuple[str, dict[int, str]]] = {
    0x41: (
        "ARM",
        {
            0xD03: "Cortex-A53", 0xD05: "Cortex-A55", 0xD07: "Cortex-A57", 0xD08: "Cortex-A72",
            0xD0B: "Cortex-A76", 0xD0C: "Neoverse N1", 0xD40: "Neoverse V1", 0xD41: "Cortex-A78",
            0xD44: "Cortex-X1", 0xD49: "Neoverse N2", 0xD4F: "Neoverse V2", 0xD83: "Neoverse V3AE",
            0xD84: "Neoverse V3", 0xD8E: "Neoverse N3",
        },
    ),
    0x46: ("Fujitsu", {0x001: "A64FX"}),
    0x48: ("HiSilicon", {0xD01: "Kunpeng 920"}),
    0x4E: ("NVIDIA", {0x004: "Carmel"}),
    0x51: ("Qualcomm", {0x001: "Oryon"}),
    0x61: ("Apple", {}),
    0xC0: ("Ampere", {0xAC3: "AmpereOne", 0xAC4: "AmpereOne"}),
}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _read_sysfs_caches(cpu: str) -> list[dict[str, str | None]]:
    caches = []
    for index in sorted(glob.glob(f"{SYSFS_CPU}/{cpu}/cache/index*")):
        caches.append(
            {k: (_read(f"{index}/{k}") or "").strip() or None for k in ("level", "type", "size", "shared_cpu_list")}
        )
    return caches


def collect() -> dict[str, Any]:
    """Raw answers of every CPU source on this machine."""
    raw: dict[str, Any] = {
        "platform": {"system": platform.system(), "machine": platform.machine(), "processor": platform.processor()},
        "os_cpu_count": os.cpu_count(),
        "proc_cpuinfo": _read("/proc/cpuinfo"),
        "meminfo": _read("/proc/meminfo"),
    }
    if os.path.isdir(SYSFS_CPU):
        freq = {}
        for k in ("cpuinfo_max_freq", "cpuinfo_min_freq", "base_frequency", "scaling_governor", "scaling_driver"):
            v = _read(f"{SYSFS_CPU}/cpu0/cpufreq/{k}")
            if v is not None:
                freq[k] = v.strip()
        # ACPI CPPC: where there is no cpufreq driver (amd-pstate off), the boost clock is
        # nominal_freq x highest_perf / nominal_perf
        cppc = {}
        for k in ("highest_perf", "nominal_perf", "nominal_freq", "lowest_freq"):
            v = _read(f"{SYSFS_CPU}/cpu0/acpi_cppc/{k}")
            if v is not None:
                cppc[k] = v.strip()
        topo = {}
        for cpu_dir in glob.glob(f"{SYSFS_CPU}/cpu[0-9]*"):
            pkg = _read(f"{cpu_dir}/topology/physical_package_id")
            core = _read(f"{cpu_dir}/topology/core_id")
            if pkg is not None and core is not None:
                topo[os.path.basename(cpu_dir)] = [pkg.strip(), core.strip()]
        raw["sysfs"] = {
            "caches_cpu0": _read_sysfs_caches("cpu0"),
            "cpufreq_cpu0": freq,
            "acpi_cppc_cpu0": cppc,
            "online": (_read(f"{SYSFS_CPU}/online") or "").strip() or None,
            "topology": topo,
            "numa_nodes": sorted(os.path.basename(p) for p in glob.glob(f"{SYSFS_NODE}/node[0-9]*")),
            "sve_default_vector_length": (_read("/proc/sys/abi/sve_default_vector_length") or "").strip() or None,
        }
    if platform.system() == "Darwin":
        raw["sysctl"] = _sysctl()
    if raw["proc_cpuinfo"] is None and "sysctl" not in raw:
        raw["py_cpuinfo"] = _py_cpuinfo()
    return raw


def _sysctl() -> dict[str, str]:
    try:
        out = subprocess.run(["sysctl", "hw", "machdep"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_sysctl(out)


def parse_sysctl(text: str) -> dict[str, str]:
    result = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            result[key.strip()] = value.strip()
    return result


def _py_cpuinfo() -> dict[str, Any] | None:
    try:
        import cpuinfo  # slow (~1 s): only where nothing better exists

        info = cpuinfo.get_cpu_info()
        return {k: info.get(k) for k in ("brand_raw", "vendor_id_raw", "hz_advertised", "flags", "arch", "count")}
    except Exception:  # noqa: BLE001 - a failing fallback costs only its values
        return None


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per block (processor), keys as written, values stripped."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def isa_from_flags(flags: set[str], arm: bool) -> list[str]:
    table = ARM_ISA if arm else X86_ISA
    found = {name for flag, name in table.items() if flag in flags}
    return [name for name in ISA_ORDER if name in found]


def simd_choice(isa: list[str], machine: str) -> tuple[str, int, list[str]]:
    """(family, vector width in bits, compiler flags) the CPU emitter uses for this ISA set."""
    s = set(isa)
    if {"avx512f", "avx512bw", "avx512vl", "fma"} <= s:
        flags = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx2", "-mfma"]
        flags += ["-mf16c"] if "f16c" in s else []
        flags += ["-mavx512bf16"] if "avx512bf16" in s else []
        return "avx512", 512, flags
    if {"avx2", "fma"} <= s:
        return "avx2-fma", 256, ["-mavx2", "-mfma"] + (["-mf16c"] if "f16c" in s else [])
    if "neon" in s and machine in ("aarch64", "arm64"):
        ext = "".join(f"+{e}" for e in ("fp16", "dotprod", "bf16", "i8mm") if e in s)
        return "neon", 128, [f"-march=armv8.2-a{ext}" if ext else "-march=armv8-a"]
    return "portable", 0, []


def _size_bytes(text: str | None) -> int | None:
    if not text:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text, re.IGNORECASE)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2).upper()]


def _cpu_list_len(text: str | None) -> int | None:
    if not text:
        return None
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += (int(hi) - int(lo) + 1) if hi else 1
    return n


def _meminfo_bytes(text: str | None, key: str) -> int | None:
    if not text:
        return None
    m = re.search(rf"^{key}:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def interpret(raw: dict[str, Any]) -> CpuInfo:
    """The CPU section from the raw answers: identity and ISA from the first source that answers
    (/proc/cpuinfo, sysctl, py-cpuinfo), then clocks, cores, caches and memory from sysfs and
    /proc/meminfo, then the SIMD family the CPU emitter targets."""
    fs = FieldSet()
    machine = ((raw.get("platform") or {}).get("machine") or "").lower()
    fs.put("architecture", machine or None, "platform")
    arm = machine in ("aarch64", "arm64") or machine.startswith("arm")
    sysfs = raw.get("sysfs") or {}
    flags: set[str] | None = None
    if raw.get("proc_cpuinfo"):
        flags, arm = _from_proc_cpuinfo(fs, raw["proc_cpuinfo"], arm)
    elif raw.get("sysctl"):
        _from_sysctl(fs, raw["sysctl"], arm)
    elif raw.get("py_cpuinfo"):
        flags = _from_py_cpuinfo(fs, raw["py_cpuinfo"])
    else:
        fs.miss("model", "no /proc/cpuinfo, sysctl or py-cpuinfo answer on this platform")
    if not fs.has("microarchitecture") and "microarchitecture" not in fs.unavailable:
        fs.miss("microarchitecture", "no CPUID family/model or MIDR read (only /proc/cpuinfo and sysctl give them)")
    if "codename" not in fs.values:
        fs.miss("codename", "microarchitecture unknown")
    if "hypervisor" not in fs.values:
        fs.miss("hypervisor", "the hypervisor flag is read from x86 /proc/cpuinfo only")
    if flags is not None:
        fs.put("isa", isa_from_flags(flags, arm), "/proc/cpuinfo flags")
    _clocks_and_cores(fs, sysfs, raw)
    _caches(fs, sysfs, raw)
    _memory(fs, sysfs, raw)
    _simd(fs, machine)
    return fs.build(CpuInfo)


def _from_proc_cpuinfo(fs: FieldSet, text: str, arm: bool) -> tuple[set[str], bool]:
    """Vendor, model, microarchitecture, cores and clocks from /proc/cpuinfo; returns its first block's
    flags and whether the CPU is an Arm one (a MIDR in the block says so even where the platform does not)."""
    blocks = parse_cpuinfo(text)
    procs = [b for b in blocks if "processor" in b] or blocks
    first = procs[0] if procs else {}
    src = "/proc/cpuinfo"
    arm = arm or "CPU implementer" in first
    flags = set((first.get("flags") or first.get("Features") or "").split())
    vendor, model = first.get("vendor_id"), first.get("model name")
    if arm and not model:
        vendor, model = _arm_name(first)
    fs.put("vendor", vendor, src)
    fs.put("model", model, src)
    if arm:
        _arm_uarch(fs, first)
    else:
        _x86_uarch(fs, vendor, _int(first.get("cpu family")), _int(first.get("model")), flags, src)
        fs.put("hypervisor", "hypervisor" in flags, "/proc/cpuinfo flags")
    fs.put("logical_cores", len(procs) or None, src)
    if procs and "physical id" in first:
        pkgs = {b.get("physical id") for b in procs}
        fs.put("sockets", len(pkgs), src)
        if "core id" in first:
            fs.put("physical_cores", len({(b.get("physical id"), b.get("core id")) for b in procs}), src)
    mhz = first.get("cpu MHz")
    if mhz:
        fs.put("current_clock_hz", int(float(mhz) * 1e6), src)
    m = re.search(r"@\s*([\d.]+)\s*GHz", model or "")
    if m:
        fs.put("base_clock_hz", int(float(m.group(1)) * 1e9), "/proc/cpuinfo model name")
    return flags, arm


def _from_sysctl(fs: FieldSet, sysctl: dict[str, str], arm: bool) -> None:
    """Everything macOS's sysctl tells: identity, cores, clock, memory, caches and the ISA."""
    src = "sysctl"
    fs.put("model", sysctl.get("machdep.cpu.brand_string"), src)
    fs.put("vendor", sysctl.get("machdep.cpu.vendor") or ("Apple" if arm else None), src)
    if arm:
        chip = re.match(r"Apple (M\d+)", sysctl.get("machdep.cpu.brand_string") or "")
        fs.put("microarchitecture", f"Apple {chip.group(1)}" if chip else None,
               "sysctl machdep.cpu.brand_string", "the brand string names no Apple M chip")
        fs.miss("codename", "not looked up for Apple chips")
    else:
        _x86_uarch(fs, sysctl.get("machdep.cpu.vendor"), _int(sysctl.get("machdep.cpu.family")),
                   _int(sysctl.get("machdep.cpu.model")), set(), src)
    fs.put("logical_cores", _int(sysctl.get("hw.logicalcpu")), src)
    fs.put("physical_cores", _int(sysctl.get("hw.physicalcpu")), src)
    fs.put("sockets", _int(sysctl.get("hw.packages")), src)
    fs.put("max_clock_hz", _int(sysctl.get("hw.cpufrequency_max")), src,
           "macOS on Apple Silicon does not report CPU clocks")
    fs.put("memory_total_bytes", _int(sysctl.get("hw.memsize")), src)
    l1 = sysctl.get("hw.perflevel0.l1dcachesize") or sysctl.get("hw.l1dcachesize")
    l2 = sysctl.get("hw.perflevel0.l2cachesize") or sysctl.get("hw.l2cachesize")
    fs.put("l1d_bytes_per_core", _int(l1), src)
    fs.put("l2_bytes_per_core", _int(l2), src, None)
    fs.put("l3_bytes_total", _int(sysctl.get("hw.l3cachesize")), src, "no L3 reported by sysctl")
    keys = {k for k in DARWIN_ISA if sysctl.get(k) == "1"}
    fs.put("isa", [n for n in ISA_ORDER if n in {DARWIN_ISA[k] for k in keys}], src)


def _from_py_cpuinfo(fs: FieldSet, info: dict[str, Any]) -> set[str]:
    """Model, vendor and core count from py-cpuinfo; returns its flags."""
    src = "py-cpuinfo"
    fs.put("model", info.get("brand_raw"), src)
    fs.put("vendor", info.get("vendor_id_raw"), src)
    fs.put("logical_cores", info.get("count"), src)
    return set(info.get("flags") or [])


def _clocks_and_cores(fs: FieldSet, sysfs: dict[str, Any], raw: dict[str, Any]) -> None:
    """Clocks and the governor from sysfs cpufreq (or ACPI CPPC); cores and sockets from sysfs where
    /proc/cpuinfo had none."""
    freq = sysfs.get("cpufreq_cpu0") or {}
    no_freq = "no cpufreq in sysfs (common in virtual machines)" if sysfs else "no sysfs on this platform"
    fs.setdefault("max_clock_hz", _khz(freq.get("cpuinfo_max_freq")), "sysfs cpufreq", no_freq)
    fs.setdefault("max_clock_hz", _cppc_boost_hz(sysfs.get("acpi_cppc_cpu0") or {}),
                  "sysfs acpi_cppc (nominal_freq x highest_perf / nominal_perf)", no_freq)
    fs.setdefault("base_clock_hz", _khz(freq.get("base_frequency")), "sysfs cpufreq",
                  "neither sysfs base_frequency nor a clock in the model name")
    fs.put("scaling_governor", freq.get("scaling_governor"), "sysfs cpufreq", no_freq)
    if not fs.has("physical_cores") and sysfs.get("topology"):
        topo = sysfs["topology"]
        fs.put("physical_cores", len({tuple(v) for v in topo.values()}), "sysfs topology")
        fs.setdefault("sockets", len({v[0] for v in topo.values()}), "sysfs topology")
    fs.setdefault("logical_cores", _cpu_list_len(sysfs.get("online")), "sysfs online")
    fs.setdefault("logical_cores", raw.get("os_cpu_count"), "os.cpu_count")
    if not fs.has("physical_cores"):
        fs.miss("physical_cores", "no core ids in /proc/cpuinfo or sysfs topology")
    if not fs.has("sockets"):
        fs.miss("sockets", "no package ids in /proc/cpuinfo or sysfs topology")


def _memory(fs: FieldSet, sysfs: dict[str, Any], raw: dict[str, Any]) -> None:
    """NUMA nodes from sysfs; total and available memory from /proc/meminfo where sysctl gave none."""
    nodes = sysfs.get("numa_nodes")
    fs.put("numa_nodes", len(nodes) if nodes else None, "sysfs node", "no NUMA information in sysfs")
    fs.setdefault("memory_total_bytes", _meminfo_bytes(raw.get("meminfo"), "MemTotal"), "/proc/meminfo",
                  "no /proc/meminfo or hw.memsize")
    fs.setdefault("memory_available_bytes", _meminfo_bytes(raw.get("meminfo"), "MemAvailable"), "/proc/meminfo",
                  "no /proc/meminfo (macOS reports no available-memory figure through sysctl)")


def _simd(fs: FieldSet, machine: str) -> None:
    """The SIMD family, vector width and compiler flags the CPU emitter uses for the ISA found."""
    isa = fs.values.get("isa")
    if isa is not None:
        family, width, flags = simd_choice(isa, machine)
        fs.put("simd_family", family, "derived from isa")
        fs.put("vector_width_bits", width or None, "derived from isa", "no SIMD unit the CPU emitter targets")
        fs.put("emitter_flags", flags, "derived from isa")
    else:
        for key in ("simd_family", "vector_width_bits", "emitter_flags"):
            fs.miss(key, "ISA unknown")


def _x86_uarch(fs: FieldSet, vendor: str | None, family: int | None, model: int | None, flags: set[str],
               src: str) -> None:
    found = x86_microarchitecture(vendor, family, model, flags)
    if isinstance(found, Uarch):
        fs.put("microarchitecture", found.name, f"{src}: {found.source}")
        fs.put("codename", found.codename, f"{src}: {found.source}", "the table names no die for this model")
    else:
        fs.miss("microarchitecture", found)
        fs.miss("codename", found)


def _arm_uarch(fs: FieldSet, block: dict[str, str]) -> None:
    impl, part = _int(block.get("CPU implementer")), _int(block.get("CPU part"))
    name = ARM_PARTS.get(impl or -1, ("", {}))[1].get(part or -1)
    where = "/proc/cpuinfo CPU implementer/part (MIDR)"
    fs.put("microarchitecture", name, where,
           f"MIDR implementer {block.get('CPU implementer')} part {block.get('CPU part')} is not in the table")
    fs.miss("codename", "not looked up for Arm cores")


def _cppc_boost_hz(cppc: dict[str, str]) -> int | None:
    highest, nominal, freq_mhz = (_int(cppc.get(k)) for k in ("highest_perf", "nominal_perf", "nominal_freq"))
    if not (highest and nominal and freq_mhz):
        return None
    return int(freq_mhz * 1e6 * highest / nominal)


def _caches(fs: FieldSet, sysfs: dict[str, Any], raw: dict[str, Any]) -> None:
    caches = sysfs.get("caches_cpu0") or []
    src = "sysfs cache"
    for c in caches:
        level, ctype, size = c.get("level"), c.get("type"), _size_bytes(c.get("size"))
        if level == "1" and ctype == "Data":
            fs.setdefault("l1d_bytes_per_core", size, src)
        elif level == "2":
            fs.setdefault("l2_bytes_per_core", size, src)
        elif level == "3" and size:
            sharers = _cpu_list_len(c.get("shared_cpu_list")) or 1
            logical = fs.values.get("logical_cores") or sharers
            fs.setdefault("l3_bytes_total", size * max(1, -(-logical // sharers)), src)
    reason = "no cache information in sysfs" if sysfs else "no sysfs on this platform"
    for key in ("l1d_bytes_per_core", "l2_bytes_per_core"):
        if not fs.has(key):
            fs.miss(key, reason)
    if not fs.has("l3_bytes_total"):
        fs.miss("l3_bytes_total", "no L3 cache reported" if caches else reason)


def _arm_name(block: dict[str, str]) -> tuple[str | None, str | None]:
    impl, part = _int(block.get("CPU implementer")), _int(block.get("CPU part"))
    if impl is None:
        return None, None
    vendor, parts = ARM_PARTS.get(impl, (f"implementer 0x{impl:02x}", {}))
    name = parts.get(part or -1) if part is not None else None
    return vendor, name or (f"part 0x{part:03x}" if part is not None else None)


def _int(text: Any) -> int | None:
    if text is None:
        return None
    try:
        return int(str(text), 0)
    except ValueError:
        return None


def _khz(text: str | None) -> int | None:
    v = _int(text)
    return v * 1000 if v else None
