"""The CPU microarchitecture from CPUID family/model, and the fp32 ceiling it implies, on recorded
/proc/cpuinfo of real machines (provenance in fixtures/SOURCES.md). Each ceiling test checks the
number and the basis text a user reads."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tracea.doctor.ceilings import cpu_ceilings, merge_measured
from tracea.doctor.sources.cpu import interpret
from tracea.doctor.sources.uarch import Uarch, x86_microarchitecture


def cpu_of(fixtures, name: str, **sysfs):
    text = (fixtures / "cpuinfo" / name).read_text()
    raw = {"platform": {"system": "Linux", "machine": "x86_64"}, "proc_cpuinfo": text}
    if sysfs:
        raw["sysfs"] = sysfs
    return interpret(raw)


def fp32(cpu):
    return next(c for c in cpu_ceilings(cpu) if c.metric == "fp32_flops")


@pytest.mark.parametrize(("name", "uarch", "codename", "source"), [
    ("zen5_ryzen9_9950x.txt", "Zen 5", "Granite Ridge", "CPUID family 26 (0x1a) model 68 (0x44)"),
    ("zen4_epyc_9654.txt", "Zen 4", "Stones/Storm Peak", "CPUID family 25 (0x19) model 17 (0x11)"),
    ("amd_epyc_ci_vm.txt", "Zen 4", "Stones/Storm Peak", "CPUID family 25 (0x19) model 17 (0x11)"),
    ("zen3_ryzen9_5950x.txt", "Zen 3", "Vermeer", "CPUID family 25 (0x19) model 33 (0x21)"),
    ("zen1_epyc_7301.txt", "Zen/Zen+", None, "CPUID family 23 (0x17) model 1 (0x1)"),
    ("sapphire_rapids_amx.txt", "Sapphire Rapids", None, "CPUID family 6 (0x6) model 143 (0x8f)"),
    ("granite_rapids_xeon6972p.txt", "Granite Rapids", None, "CPUID family 6 (0x6) model 173 (0xad)"),
    ("cascadelake_xeon_8260m.txt", "Cascade Lake", None, "told apart by AVX-512 BF16/VNNI flags"),
    ("arrowlake_core_ultra9_285.txt", "Arrow Lake", None, "CPUID family 6 (0x6) model 198 (0xc6)"),
])
def test_microarchitecture_from_family_and_model(fixtures, name, uarch, codename, source):
    cpu = cpu_of(fixtures, name)
    assert (cpu.microarchitecture, cpu.codename) == (uarch, codename)
    assert source in cpu.sources["microarchitecture"]
    assert cpu.sources["microarchitecture"].startswith("/proc/cpuinfo")


def test_the_ci_vm_says_it_is_a_virtual_machine_and_bare_metal_does_not(fixtures):
    assert cpu_of(fixtures, "amd_epyc_ci_vm.txt").hypervisor is True
    assert cpu_of(fixtures, "zen5_ryzen9_9950x.txt").hypervisor is False


# LLVM compiler-rt/lib/builtins/cpu_model/x86.c (getAMDProcessorTypeAndSubtype, with Zen 5) and GCC
# common/config/i386/cpuinfo.h (get_amd_cpu): one model of each range they list, and their fallbacks.
@pytest.mark.parametrize(("family", "model", "flags", "uarch", "codename"), [
    (0x17, 0x08, set(), "Zen/Zen+", None),
    (0x17, 0x18, set(), "Zen/Zen+", "Raven/Picasso"),
    (0x17, 0x31, set(), "Zen 2", "Starship"),
    (0x17, 0x71, set(), "Zen 2", "Matisse"),
    (0x17, 0xA0, set(), "Zen 2", "Mendocino"),
    (0x19, 0x01, set(), "Zen 3", "Genesis/Chagall"),
    (0x19, 0x44, set(), "Zen 3+", "Rembrandt"),
    (0x19, 0x61, {"avx512f"}, "Zen 4", "Raphael"),
    (0x19, 0x74, {"avx512f"}, "Zen 4", "Phoenix/Hawkpoint1"),
    (0x19, 0xA0, {"avx512f"}, "Zen 4", "Stones-Dense"),
    (0x19, 0x90, {"avx512f"}, "Zen 4", None),  # not listed: GCC's AVX-512 rule
    (0x19, 0x90, set(), "Zen 3", None),
    (0x1A, 0x02, set(), "Zen 5", "Breithorn"),
    (0x1A, 0x11, set(), "Zen 5", "Breithorn-Dense"),
    (0x1A, 0x24, set(), "Zen 5", "Strix 1"),
    (0x1A, 0x60, set(), "Zen 5", "Krackan1"),
    (0x1A, 0x70, set(), "Zen 5", "Sarlak"),
    (0x1A, 0x90, {"avx512_vp2intersect"}, "Zen 5", None),  # not listed: GCC's VP2INTERSECT rule
])
def test_amd_table(family, model, flags, uarch, codename):
    found = x86_microarchitecture("AuthenticAMD", family, model, flags)
    assert isinstance(found, Uarch) and (found.name, found.codename) == (uarch, codename)


@pytest.mark.parametrize(("model", "flags", "uarch"), [
    (0x55, set(), "Skylake-SP"), (0x55, {"avx512_vnni"}, "Cascade Lake"),
    (0x55, {"avx512_vnni", "avx512_bf16"}, "Cooper Lake"), (0x6A, set(), "Ice Lake-SP"),
    (0x8F, set(), "Sapphire Rapids"), (0xCF, set(), "Emerald Rapids"), (0xAD, set(), "Granite Rapids"),
    (0xAE, set(), "Granite Rapids-D"), (0x97, set(), "Alder Lake"), (0xB7, set(), "Raptor Lake"),
    (0x7E, set(), "Ice Lake"), (0x8C, set(), "Tiger Lake"), (0x9E, set(), "Skylake"),
])
def test_intel_table(model, flags, uarch):
    found = x86_microarchitecture("GenuineIntel", 6, model, flags)
    assert isinstance(found, Uarch) and found.name == uarch


def test_unknown_is_a_reason_not_a_guess():
    assert x86_microarchitecture("AuthenticAMD", 0x1A, 0x90, set()).startswith("AMD CPUID family 26")
    assert "not in the table" in x86_microarchitecture("GenuineIntel", 6, 0x01, set())
    assert x86_microarchitecture("GenuineIntel", None, None, set()) == "no CPUID family/model reported"
    assert "no microarchitecture table" in x86_microarchitecture("CentaurHauls", 6, 0x0F, set())


def test_zen5_ceiling_counts_full_width_fma(fixtures):
    cpu = cpu_of(fixtures, "zen5_ryzen9_9950x.txt")  # one block: 1 core, idling at 600 MHz
    c = fp32(cpu)
    assert c.spec == pytest.approx(1 * 0.6e9 * 64)
    assert c.basis == ("1 core x 0.60 GHz (current; the boost clock is unknown; a kernel may run above this "
                       "ceiling: run --measure) x 64 FLOP/clock (Zen 5: 2 x 512-bit FMA pipes, as on desktop "
                       "and server dies (mobile Strix 1 and Krackan dies have 256-bit datapaths; assumed full "
                       "width for every other die))")


def test_the_issue_13_machine(fixtures):
    """A 2-vCPU Zen 5 VM at 2.6 GHz: 166 GFLOP/s under the old Zen 4 rule, below the 440 GFLOP/s
    Tracea's own GEMM ran at; twice that now, and the basis says the boost clock is unknown."""
    cpu = dataclasses.replace(cpu_of(fixtures, "zen5_ryzen9_9950x.txt"), physical_cores=2,
                              current_clock_hz=2_596_000_000, hypervisor=True)
    c = fp32(cpu)
    assert c.spec == pytest.approx(2 * 2.596e9 * 64)
    assert "(current; the boost clock is unknown: a virtual machine shows no cpufreq; a kernel may run" in c.basis


def test_zen5_mobile_die_has_half_width(fixtures):
    cpu = dataclasses.replace(cpu_of(fixtures, "zen5_ryzen9_9950x.txt"), codename="Strix 1")
    c = fp32(cpu)
    assert c.spec == pytest.approx(0.6e9 * 32)
    assert "x 32 FLOP/clock (Zen 5 Strix 1: 512-bit ops on 2 x 256-bit datapaths (mobile die))" in c.basis


def test_zen4_ceiling_is_double_pumped(fixtures):
    c = fp32(cpu_of(fixtures, "zen4_epyc_9654.txt"))
    assert c.spec == pytest.approx(2.4e9 * 32)
    assert c.basis.endswith("x 32 FLOP/clock (Zen 4: AVX-512 double-pumped on 2 x 256-bit FMA pipes)")


def test_zen1_ceiling_splits_256_bit_ops(fixtures):
    c = fp32(cpu_of(fixtures, "zen1_epyc_7301.txt"))
    assert c.spec == pytest.approx(2.2e9 * 16)
    assert c.basis.endswith("x 16 FLOP/clock (Zen/Zen+: 2 x 128-bit FMA pipes; 256-bit ops are split)")


def test_cascade_lake_uses_the_base_clock_of_its_model_name(fixtures):
    c = fp32(cpu_of(fixtures, "cascadelake_xeon_8260m.txt"))
    assert c.spec == pytest.approx(2.4e9 * 64)
    assert c.basis.startswith("1 core x 2.40 GHz (base, /proc/cpuinfo model name; boost runs higher, a kernel "
                              "may run above this ceiling: run --measure) x 64 FLOP/clock (Cascade Lake: 2 AVX-512 "
                              "FMA units as on Gold 6000 and Platinum SKUs (Silver, Bronze and some Gold 5000 SKUs "
                              "have 1: half this))")


def test_arrow_lake_counts_the_p_core(fixtures):
    c = fp32(cpu_of(fixtures, "arrowlake_core_ultra9_285.txt"))
    assert c.spec == pytest.approx(0.8e9 * 32)
    assert c.basis.endswith("x 32 FLOP/clock (Arrow Lake: 2 x 256-bit FMA pipes, the P-core figure for every "
                            "core (E-cores do less, so an upper bound))")


def test_sysfs_max_clock_is_the_boost(fixtures):
    cpu = cpu_of(fixtures, "zen4_epyc_9654.txt", cpufreq_cpu0={"cpuinfo_max_freq": "3700000"})
    c = fp32(cpu)
    assert cpu.max_clock_hz == 3_700_000_000
    assert c.spec == pytest.approx(3.7e9 * 32)
    assert "(max boost, sysfs cpufreq; all-core and AVX-512 clocks run lower)" in c.basis


def test_acpi_cppc_boost_where_there_is_no_cpufreq(fixtures):
    cpu = cpu_of(fixtures, "zen4_epyc_9654.txt", cpufreq_cpu0={},
                 acpi_cppc_cpu0={"highest_perf": "231", "nominal_perf": "150", "nominal_freq": "2400"})
    assert cpu.max_clock_hz == int(2400e6 * 231 / 150)
    assert "acpi_cppc" in cpu.sources["max_clock_hz"]
    assert fp32(cpu).spec == pytest.approx(2400e6 * 231 / 150 * 32)


def test_unknown_microarchitecture_assumes_the_widest_of_its_isa(fixtures):
    cpu = dataclasses.replace(cpu_of(fixtures, "zen4_epyc_9654.txt"), microarchitecture=None)
    c = fp32(cpu)
    assert c.spec == pytest.approx(2.4e9 * 64)
    assert ("x 64 FLOP/clock (microarchitecture unknown: assumed 2 x 512-bit FMA pipes (the widest of its ISA, "
            "an upper bound))") in c.basis


def test_a_measured_figure_above_the_spec_says_the_spec_is_wrong(fixtures):
    spec = cpu_ceilings(cpu_of(fixtures, "amd_epyc_ci_vm.txt"))
    merged = merge_measured(spec, {"cpu": {"fp32_flops": {"value": 440e9, "method": "FMA loop"}}})
    c = next(c for c in merged if c.metric == "fp32_flops")
    assert c.measured == 440e9 and c.spec == pytest.approx(2 * 2.596132e9 * 32)
    assert c.reason.startswith("measured is 2.65x the spec: the spec's clock or per-clock figure is too low")


def test_doctor_text_and_json_show_the_microarchitecture(fixtures):
    import subprocess
    import sys

    snap = fixtures / "snapshots" / "ci_vm.json"
    out = subprocess.run([sys.executable, "-m", "tracea", "doctor", "--input", str(snap), "--plain"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "microarch      Zen 4 (Stones/Storm Peak), in a virtual machine · CPUID family 25 (0x19) model 17" in out.stdout
    js = subprocess.run([sys.executable, "-m", "tracea", "doctor", "--input", str(snap), "--json"],
                        capture_output=True, text=True, timeout=120)
    cpu = json.loads(js.stdout)["cpu"]
    assert (cpu["microarchitecture"], cpu["codename"], cpu["hypervisor"]) == ("Zen 4", "Stones/Storm Peak", True)


def test_arm_cores_by_midr_part(fixtures):
    text = (fixtures / "cpuinfo" / "arm_neoverse_v2_grace.txt").read_text()
    cpu = interpret({"platform": {"system": "Linux", "machine": "aarch64"}, "proc_cpuinfo": text})
    assert cpu.microarchitecture == "Neoverse V2" and "MIDR" in cpu.sources["microarchitecture"]
    assert cpu.hypervisor is None and "x86" in cpu.unavailable["hypervisor"]
    cpu = dataclasses.replace(cpu, max_clock_hz=3_400_000_000, sources={**cpu.sources, "max_clock_hz": "sysfs cpufreq"})
    c = fp32(cpu)
    assert c.spec == pytest.approx(3.4e9 * 32)
    assert c.basis.endswith("x 32 FLOP/clock (Neoverse V2: 4 x 128-bit FMA pipes)")
