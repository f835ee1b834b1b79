"""Roofline ceilings per device: peak FLOP/s per precision and memory bandwidth from the spec
(clock x units, labelled "spec"), beside the measured figures when ``--measure`` ran.
"""

from __future__ import annotations

from typing import Any

from .gpu_specs import HALF_RATE_ON_GEFORCE, spec_for
from .report import Ceiling, CpuInfo, NvidiaGpu

# FP32 FMA datapaths per core, by microarchitecture: (FMA pipes, bits per pipe, what is assumed).
# FLOP/clock = pipes x min(bits, the widest vector the CPU runs) / 32 lanes-per-bit x 2 (an FMA is 2 FLOP).
# Sources in docs/doctor.md ("Ceilings").
_P_CORE = "the P-core figure for every core (E-cores do less, so an upper bound)"
FMA_DATAPATHS: dict[str, tuple[int, int, str]] = {
    "Zen/Zen+": (2, 128, "2 x 128-bit FMA pipes; 256-bit ops are split"),
    "Zen 2": (2, 256, "2 x 256-bit FMA pipes"),
    "Zen 3": (2, 256, "2 x 256-bit FMA pipes"),
    "Zen 3+": (2, 256, "2 x 256-bit FMA pipes"),
    "Zen 4": (2, 256, "AVX-512 double-pumped on 2 x 256-bit FMA pipes"),
    "Zen 5": (2, 512, "2 x 512-bit FMA pipes, as on desktop and server dies (mobile Strix 1 and Krackan "
                      "dies have 256-bit datapaths; assumed full width for every other die)"),
    "Haswell": (2, 256, "2 x 256-bit FMA pipes"),
    "Broadwell": (2, 256, "2 x 256-bit FMA pipes"),
    "Skylake": (2, 256, "2 x 256-bit FMA pipes"),
    "Cannon Lake": (2, 256, "1 x 512-bit FMA (ports 0+1 fused) = 2 x 256-bit"),
    "Ice Lake": (2, 256, "1 x 512-bit FMA (ports 0+1 fused) = 2 x 256-bit"),
    "Tiger Lake": (2, 256, "1 x 512-bit FMA (ports 0+1 fused) = 2 x 256-bit"),
    "Rocket Lake": (2, 256, "1 x 512-bit FMA (ports 0+1 fused) = 2 x 256-bit"),
    **dict.fromkeys(("Skylake-SP", "Cascade Lake", "Cooper Lake"), (
        2, 512, "2 AVX-512 FMA units as on Gold 6000 and Platinum SKUs (Silver, Bronze and some Gold 5000 "
                "SKUs have 1: half this)")),
    **dict.fromkeys(("Ice Lake-SP", "Sapphire Rapids", "Emerald Rapids", "Granite Rapids", "Granite Rapids-D"),
                    (2, 512, "2 x 512-bit FMA units")),
    **dict.fromkeys(("Alder Lake", "Raptor Lake", "Meteor Lake", "Arrow Lake", "Lunar Lake", "Panther Lake"),
                    (2, 256, f"2 x 256-bit FMA pipes, {_P_CORE}")),
    **dict.fromkeys(("Neoverse V1", "Neoverse V2", "Neoverse V3"), (4, 128, "4 x 128-bit FMA pipes")),
    **dict.fromkeys(("Neoverse N1", "Neoverse N2", "Cortex-A76", "Cortex-A78"), (2, 128, "2 x 128-bit FMA pipes")),
}
# Zen 5 dies whose 512-bit ops run on 256-bit datapaths (the mobile parts).
HALF_WIDTH_DIES = {("Zen 5", "Strix 1"), ("Zen 5", "Krackan1")}
# Arm cores named only by the model string (Apple through sysctl) with four 128-bit FMA pipes.
WIDE_NEON = ("Neoverse V1", "Neoverse V2", "Neoverse V3", "Apple")


def fma_datapath(cpu: CpuInfo) -> tuple[int, int, str] | None:
    """(FMA pipes, bits each, basis) for this CPU: from the microarchitecture table, else assumed from
    the SIMD family (the widest any core of that family has, so the ceiling stays an upper bound)."""
    uarch = cpu.microarchitecture
    width = cpu.vector_width_bits
    if uarch and (uarch, cpu.codename) in HALF_WIDTH_DIES:
        return 2, 256, f"{uarch} {cpu.codename}: 512-bit ops on 2 x 256-bit datapaths (mobile die)"
    if uarch in FMA_DATAPATHS:
        pipes, bits, basis = FMA_DATAPATHS[uarch]
        return pipes, bits, f"{uarch}: {basis}"
    if uarch and uarch.startswith("Apple M"):
        return 4, 128, f"{uarch}: 4 x 128-bit FMA pipes"
    why = f"{uarch} is not in the FMA table" if uarch else "microarchitecture unknown"
    if cpu.simd_family == "neon":
        if any(w in (cpu.model or "") for w in WIDE_NEON):
            return 4, 128, f"{why}: 4 x 128-bit FMA pipes as the model name says"
        return 2, 128, f"{why}: assumed 2 x 128-bit FMA pipes"
    if cpu.simd_family in ("avx512", "avx2-fma") and width:
        return 2, width, f"{why}: assumed 2 x {width}-bit FMA pipes (the widest of its ISA, an upper bound)"
    if cpu.simd_family == "portable":
        return 1, 32, f"{why}: no SIMD unit the emitter targets; assumed one scalar FMA per clock"
    return None


def _clock(cpu: CpuInfo) -> tuple[int | None, str]:
    """The clock a spec ceiling uses, and what it is."""
    if cpu.max_clock_hz:
        return cpu.max_clock_hz, f"max boost, {cpu.sources.get('max_clock_hz')}; all-core and AVX-512 clocks run lower"
    hint = "a kernel may run above this ceiling: run --measure"
    if cpu.base_clock_hz:
        return cpu.base_clock_hz, f"base, {cpu.sources.get('base_clock_hz')}; boost runs higher, {hint}"
    vm = ": a virtual machine shows no cpufreq" if cpu.hypervisor else ""
    return cpu.current_clock_hz, f"current; the boost clock is unknown{vm}; {hint}"


def cpu_ceilings(cpu: CpuInfo) -> list[Ceiling]:
    out = []
    clock, which = _clock(cpu)
    cores = cpu.physical_cores or cpu.logical_cores
    datapath = fma_datapath(cpu)
    if clock and cores and datapath:
        pipes, bits, basis = datapath
        per_clock = pipes * min(bits, cpu.vector_width_bits or bits) // 32 * 2
        out.append(Ceiling(
            device="cpu", metric="fp32_flops", unit="FLOP/s", spec=float(clock * cores * per_clock),
            basis=f"{cores} core{'s' if cores != 1 else ''} x {clock / 1e9:.2f} GHz ({which}) x {per_clock} FLOP/clock ({basis})",
        ))
    else:
        out.append(Ceiling(device="cpu", metric="fp32_flops", unit="FLOP/s",
                           reason="clock, core count or SIMD family unknown"))
    out.append(Ceiling(device="cpu", metric="memory_bandwidth", unit="B/s",
                       reason="DRAM channel count and speed are not readable without root (dmidecode); "
                              "run --measure for a stream triad"))
    return out


def gpu_ceilings(gpu: NvidiaGpu) -> list[Ceiling]:
    name = f"cuda:{gpu.cuda_index}"
    cc = tuple(int(x) for x in gpu.compute_capability.split(".")) if gpu.compute_capability else None
    spec = spec_for(cc)  # type: ignore[arg-type]
    if gpu.mig_mode == "enabled" or (gpu.uuid or "").startswith("MIG-"):
        return [Ceiling(device=name, metric="bf16_tensor_flops", unit="FLOP/s",
                        reason="MIG: the ceilings are the slice's, and its SM count comes only from cuda-core")]
    out = []
    clock = gpu.sm_clock_max_mhz
    geforce = cc in HALF_RATE_ON_GEFORCE and "GeForce" in (gpu.name or "")
    if spec and gpu.sm_count and clock:
        for precision, per_clock in spec.flops_per_clock_per_sm.items():
            unit_kind = "CUDA cores" if precision in ("fp32", "fp64") else "tensor cores, dense"
            if geforce and precision in ("fp16", "bf16", "tf32"):
                per_clock //= 2
                unit_kind += ", GeForce: fp32 accumulate at half rate"
            metric = f"{precision}_flops" if precision in ("fp32", "fp64") else f"{precision}_tensor_flops"
            unit = "OP/s" if precision == "int8" else "FLOP/s"
            out.append(Ceiling(
                device=name, metric=metric, unit=unit, spec=float(gpu.sm_count * clock * 1e6 * per_clock),
                basis=f"{gpu.sm_count} SMs x {clock} MHz (max SM clock; datasheets often use a lower sustained "
                      f"clock) x {per_clock} per clock per SM ({unit_kind})",
            ))
    else:
        out.append(Ceiling(device=name, metric="bf16_tensor_flops", unit="FLOP/s",
                           reason="SM count, max SM clock or compute capability unknown"))
    bus, mclock = gpu.memory_bus_width_bits, gpu.memory_clock_max_mhz
    if bus and mclock:
        out.append(Ceiling(
            device=name, metric="memory_bandwidth", unit="B/s", spec=float(mclock * 1e6 * 2 * bus / 8),
            basis=f"{mclock} MHz (max memory clock) x 2 (double data rate) x {bus}-bit bus / 8",
        ))
    else:
        out.append(Ceiling(device=name, metric="memory_bandwidth", unit="B/s",
                           reason="memory bus width or max memory clock unknown"))
    return out


def merge_measured(ceilings: list[Ceiling], measured: dict[str, Any] | None) -> list[Ceiling]:
    """Attach measured values ({device: {metric: {value, method} | {error}}}) to the spec ceilings."""
    if not measured:
        return ceilings
    out = []
    seen = set()
    for c in ceilings:
        m = (measured.get(c.device) or {}).get(c.metric)
        seen.add((c.device, c.metric))
        if m:
            value = m.get("value")
            reason = c.reason if value is not None else (m.get("error") or c.reason)
            if value is not None and c.spec is not None and value > c.spec:
                # hardware cannot beat its own peak: the spec's clock or per-clock figure is what is wrong
                reason = (f"measured is {value / c.spec:.2f}x the spec: the spec's clock or per-clock figure is "
                          "too low for this machine; the measured figure is the ceiling that holds")
            c = Ceiling(**{**c.to_json(), "measured": value, "method": m.get("method"), "reason": reason})
        out.append(c)
    for device, metrics in measured.items():
        for metric, m in metrics.items():
            if (device, metric) not in seen:
                out.append(Ceiling(device=device, metric=metric, unit=m.get("unit", "FLOP/s"),
                                   measured=m.get("value"), method=m.get("method"),
                                   reason="no spec figure for this metric" if m.get("value") is not None
                                   else m.get("error")))
    return out
