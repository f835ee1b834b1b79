"""Roofline ceilings per device: peak FLOP/s per precision and memory bandwidth from the spec
(clock x units, labelled "spec"), beside the measured figures when ``--measure`` ran.
"""

from __future__ import annotations

from typing import Any

from .gpu_specs import HALF_RATE_ON_GEFORCE, spec_for
from .report import Ceiling, CpuInfo, NvidiaGpu

# FP32 FLOP per clock per core for a SIMD family: 2 FMA pipes x lanes x 2 FLOP.
CPU_FP32_FLOPS_PER_CLOCK = {"avx512": 64, "avx2-fma": 32, "neon": 16, "portable": 2}
# Arm cores with four 128-bit FMA pipes instead of two.
WIDE_NEON = ("Neoverse V1", "Neoverse V2", "Neoverse V3", "Apple")


def cpu_ceilings(cpu: CpuInfo) -> list[Ceiling]:
    out = []
    clock = cpu.max_clock_hz or cpu.base_clock_hz or cpu.current_clock_hz
    which = "max" if cpu.max_clock_hz else "base" if cpu.base_clock_hz else "current"
    cores = cpu.physical_cores or cpu.logical_cores
    per_clock = CPU_FP32_FLOPS_PER_CLOCK.get(cpu.simd_family or "")
    pipes = "2 FMA pipes"
    if cpu.simd_family == "neon" and any(w in (cpu.model or "") for w in WIDE_NEON):
        per_clock, pipes = 32, "4 x 128-bit FMA pipes"
    elif cpu.simd_family == "avx512" and cpu.vendor == "AuthenticAMD":
        # Zen 4 runs 512-bit FMAs double-pumped on 256-bit pipes; Zen 5 has full-width pipes (64), but a
        # virtual machine's model name often does not say which, so the figure that holds for both.
        per_clock, pipes = 32, "2 x 256-bit FMA pipes as on Zen 4; Zen 5 doubles it"
    if clock and cores and per_clock:
        out.append(Ceiling(
            device="cpu", metric="fp32_flops", unit="FLOP/s", spec=float(clock * cores * per_clock),
            basis=f"{cores} cores x {clock / 1e9:.2f} GHz ({which}) x {per_clock} FLOP/clock ({cpu.simd_family}, {pipes})",
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
            c = Ceiling(**{**c.to_json(), "measured": m.get("value"), "method": m.get("method"),
                           "reason": c.reason if m.get("value") is not None else (m.get("error") or c.reason)})
        out.append(c)
    for device, metrics in measured.items():
        for metric, m in metrics.items():
            if (device, metric) not in seen:
                out.append(Ceiling(device=device, metric=metric, unit=m.get("unit", "FLOP/s"),
                                   measured=m.get("value"), method=m.get("method"),
                                   reason="no spec figure for this metric" if m.get("value") is not None
                                   else m.get("error")))
    return out
