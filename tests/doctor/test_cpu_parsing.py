"""ISA, model and topology parsing from recorded /proc/cpuinfo and sysctl output of real machines
(provenance in fixtures/SOURCES.md)."""

from __future__ import annotations

import pytest

from tracea.doctor.sources.cpu import interpret, parse_cpuinfo, parse_sysctl, simd_choice


def cpu_from_cpuinfo(fixtures, name: str, machine: str = "x86_64"):
    text = (fixtures / "cpuinfo" / name).read_text()
    return interpret({"platform": {"system": "Linux", "machine": machine}, "proc_cpuinfo": text})


def test_ci_vm_amd_epyc(fixtures):
    cpu = cpu_from_cpuinfo(fixtures, "amd_epyc_ci_vm.txt")
    assert cpu.vendor == "AuthenticAMD"
    assert cpu.model == "AMD EPYC"
    assert cpu.logical_cores == 2 and cpu.physical_cores == 2 and cpu.sockets == 1
    assert {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx512bf16"} <= set(cpu.isa)
    assert "amx-tile" not in cpu.isa and "avx512fp16" not in cpu.isa
    assert cpu.simd_family == "avx512" and cpu.vector_width_bits == 512
    assert cpu.current_clock_hz == 2_596_132_000
    assert cpu.sources["isa"] == "/proc/cpuinfo flags"


def test_sapphire_rapids_has_amx_and_avx512_fp16(fixtures):
    cpu = cpu_from_cpuinfo(fixtures, "sapphire_rapids_amx.txt")
    assert cpu.vendor == "GenuineIntel"
    assert "8480C" in cpu.model
    assert {"amx-tile", "amx-bf16", "amx-int8", "avx512fp16", "avx512bf16", "avx512vnni", "avx512f"} <= set(cpu.isa)
    assert cpu.simd_family == "avx512"
    assert "-mavx512bf16" in cpu.emitter_flags
    assert cpu.base_clock_hz is None or cpu.base_clock_hz > 1e9


def test_granite_rapids(fixtures):
    cpu = cpu_from_cpuinfo(fixtures, "granite_rapids_xeon6972p.txt")
    assert {"amx-tile", "amx-bf16", "amx-int8", "avx512fp16"} <= set(cpu.isa)
    assert "6972P" in cpu.model


def test_graviton3_neoverse_v1_with_sve(fixtures):
    cpu = cpu_from_cpuinfo(fixtures, "arm_sve_server.txt", machine="aarch64")
    assert (cpu.vendor, cpu.model) == ("ARM", "Neoverse V1")
    assert {"neon", "sve", "fp16", "dotprod"} <= set(cpu.isa)
    assert "sve2" not in cpu.isa  # this kernel listed sve but not sve2
    assert not any(isa.startswith("avx") for isa in cpu.isa)
    assert cpu.simd_family == "neon" and cpu.vector_width_bits == 128
    assert cpu.emitter_flags[0].startswith("-march=armv8.2-a+fp16+dotprod")


def test_grace_neoverse_v2_with_sve2_bf16_i8mm(fixtures):
    cpu = cpu_from_cpuinfo(fixtures, "arm_neoverse_v2_grace.txt", machine="aarch64")
    assert (cpu.vendor, cpu.model) == ("ARM", "Neoverse V2")
    assert {"neon", "sve", "sve2", "bf16", "i8mm", "fp16", "dotprod"} <= set(cpu.isa)
    assert cpu.emitter_flags == ["-march=armv8.2-a+fp16+dotprod+bf16+i8mm"]


@pytest.mark.parametrize("chip", ["m4_max", "m3_max"])
def test_macos_sysctl(fixtures, chip):
    sysctl = parse_sysctl((fixtures / "apple" / f"{chip}_sysctl.txt").read_text())
    cpu = interpret({"platform": {"system": "Darwin", "machine": "arm64"}, "sysctl": sysctl})
    assert cpu.model == {"m4_max": "Apple M4 Max", "m3_max": "Apple M3 Max"}[chip]
    assert cpu.memory_total_bytes == int(sysctl["hw.memsize"])
    assert cpu.logical_cores == int(sysctl["hw.logicalcpu"])
    assert {"neon", "fp16", "dotprod"} <= set(cpu.isa)
    assert cpu.simd_family == "neon"
    assert cpu.sources["model"] == "sysctl"


def test_cpuinfo_accepts_space_separators_and_blank_blocks():
    blocks = parse_cpuinfo("processor       : 0\nflags : avx2 fma\n\n\nprocessor\t: 1\nflags\t: avx2 fma\n")
    assert [b["processor"] for b in blocks] == ["0", "1"]
    assert blocks[1]["flags"] == "avx2 fma"


def test_missing_sources_are_values_with_reasons():
    cpu = interpret({"platform": {"system": "Plan9", "machine": "mips"}})
    assert cpu.model is None and "no /proc/cpuinfo" in cpu.unavailable["model"]
    assert cpu.isa is None and cpu.unavailable["simd_family"] == "ISA unknown"


@pytest.mark.parametrize(
    ("isa", "machine", "family"),
    [
        (["avx2", "fma"], "x86_64", "avx2-fma"),
        (["avx512f", "avx512bw", "avx512vl", "avx2", "fma"], "x86_64", "avx512"),
        (["avx512f", "avx2", "fma"], "x86_64", "avx2-fma"),  # AVX-512 without BW/VL: the AVX2 path
        (["sse4.2", "avx"], "x86_64", "portable"),
        (["neon"], "aarch64", "neon"),
    ],
)
def test_simd_choice(isa, machine, family):
    assert simd_choice(isa, machine)[0] == family


def test_zen3_has_avx2_fma_and_no_avx512(fixtures):
    cpu = cpu_from_cpuinfo(fixtures, "zen3_ryzen9_5950x.txt")
    assert cpu.model == "AMD Ryzen 9 5950X 16-Core Processor"
    assert {"sse4.2", "avx", "avx2", "fma", "f16c"} <= set(cpu.isa)
    assert not any(i.startswith(("avx512", "amx")) for i in cpu.isa)
    assert cpu.simd_family == "avx2-fma" and cpu.vector_width_bits == 256
    assert cpu.emitter_flags == ["-mavx2", "-mfma", "-mf16c"]
    assert cpu.logical_cores == 4 and cpu.physical_cores == 4  # the recorded blocks
