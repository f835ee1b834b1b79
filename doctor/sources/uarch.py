"""The CPU microarchitecture from its CPUID family and model, which say it unambiguously where the
model name ("AMD EPYC" in a VM) and the compiler's ``-march=native`` (``znver3`` from a compiler older
than the CPU) do not.

The ranges follow two public readings of the same vendor documents: LLVM's
``compiler-rt/lib/builtins/cpu_model/x86.c`` (``getAMDProcessorTypeAndSubtype``,
``getIntelProcessorTypeAndSubtype``, whose comments name each model range) and GCC's
``common/config/i386/cpuinfo.h`` (``get_amd_cpu``: family 19h outside the listed ranges is Zen 4 when
it has AVX-512, family 1Ah up to model 77h is Zen 5). Codenames are LLVM's. docs/doctor.md lists them.
"""

from __future__ import annotations

from typing import NamedTuple


class Uarch(NamedTuple):
    name: str  # "Zen 4", "Sapphire Rapids"
    codename: str | None  # the die, where the table says it ("Granite Ridge", "Strix 1")
    source: str  # how it was decided


# (family, first model, last model, microarchitecture, codename): AMD family 17h, 19h, 1Ah.
AMD_RANGES: tuple[tuple[int, int, int, str, str | None], ...] = (
    (0x17, 0x00, 0x0F, "Zen/Zen+", None),
    (0x17, 0x10, 0x1F, "Zen/Zen+", "Raven/Picasso"),
    (0x17, 0x20, 0x2F, "Zen/Zen+", "Raven2"),
    (0x17, 0x30, 0x3F, "Zen 2", "Starship"),
    (0x17, 0x47, 0x47, "Zen 2", "Cardinal"),
    (0x17, 0x60, 0x67, "Zen 2", "Renoir"),
    (0x17, 0x68, 0x6F, "Zen 2", "Lucienne"),
    (0x17, 0x70, 0x7F, "Zen 2", "Matisse"),
    (0x17, 0x84, 0x87, "Zen 2", "ProjectX"),
    (0x17, 0x90, 0x97, "Zen 2", "VanGogh"),
    (0x17, 0x98, 0x9F, "Zen 2", "Mero"),
    (0x17, 0xA0, 0xAF, "Zen 2", "Mendocino"),
    (0x19, 0x00, 0x0F, "Zen 3", "Genesis/Chagall"),
    (0x19, 0x10, 0x1F, "Zen 4", "Stones/Storm Peak"),
    (0x19, 0x20, 0x2F, "Zen 3", "Vermeer"),
    (0x19, 0x30, 0x3F, "Zen 3", "Badami"),
    (0x19, 0x40, 0x4F, "Zen 3+", "Rembrandt"),
    (0x19, 0x50, 0x5F, "Zen 3", "Cezanne"),
    (0x19, 0x60, 0x6F, "Zen 4", "Raphael"),
    (0x19, 0x70, 0x77, "Zen 4", "Phoenix/Hawkpoint1"),
    (0x19, 0x78, 0x7F, "Zen 4", "Phoenix 2/Hawkpoint2"),
    (0x19, 0xA0, 0xAF, "Zen 4", "Stones-Dense"),
    (0x1A, 0x00, 0x0F, "Zen 5", "Breithorn"),
    (0x1A, 0x10, 0x1F, "Zen 5", "Breithorn-Dense"),
    (0x1A, 0x20, 0x2F, "Zen 5", "Strix 1"),
    (0x1A, 0x30, 0x37, "Zen 5", "Strix 2"),
    (0x1A, 0x38, 0x3F, "Zen 5", "Strix 3"),
    (0x1A, 0x40, 0x4F, "Zen 5", "Granite Ridge"),
    (0x1A, 0x50, 0x5F, "Zen 5", "Weisshorn"),
    (0x1A, 0x60, 0x6F, "Zen 5", "Krackan1"),
    (0x1A, 0x70, 0x77, "Zen 5", "Sarlak"),
)

# Intel family 6: model -> microarchitecture (client parts keep their product-line name).
INTEL_FAMILY6: dict[int, str] = {
    **dict.fromkeys((0x3C, 0x3F, 0x45, 0x46), "Haswell"),
    **dict.fromkeys((0x3D, 0x47, 0x4F, 0x56), "Broadwell"),
    **dict.fromkeys((0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6), "Skylake"),  # incl. Kaby/Coffee/Comet Lake
    0x55: "Skylake-SP",  # or Cascade Lake / Cooper Lake: told apart by flags below
    0x66: "Cannon Lake",
    **dict.fromkeys((0x6A, 0x6C), "Ice Lake-SP"),
    **dict.fromkeys((0x7D, 0x7E), "Ice Lake"),
    **dict.fromkeys((0x8C, 0x8D), "Tiger Lake"),
    0xA7: "Rocket Lake",
    **dict.fromkeys((0x97, 0x9A), "Alder Lake"),
    **dict.fromkeys((0xB7, 0xBA, 0xBF), "Raptor Lake"),
    **dict.fromkeys((0xAA, 0xAC), "Meteor Lake"),
    **dict.fromkeys((0xC5, 0xC6), "Arrow Lake"),
    0xBD: "Lunar Lake",
    0xCC: "Panther Lake",
    0x8F: "Sapphire Rapids",
    0xCF: "Emerald Rapids",
    0xAD: "Granite Rapids",
    0xAE: "Granite Rapids-D",
    0xAF: "Sierra Forest",
    0xDD: "Clearwater Forest",
}


def x86_microarchitecture(vendor: str | None, family: int | None, model: int | None,
                          flags: set[str]) -> Uarch | str:
    """The microarchitecture of an x86 CPU, or the reason it is unknown."""
    if family is None or model is None:
        return "no CPUID family/model reported"
    where = f"CPUID family {family} (0x{family:x}) model {model} (0x{model:x})"
    if vendor == "AuthenticAMD":
        for fam, lo, hi, name, codename in AMD_RANGES:
            if fam == family and lo <= model <= hi:
                return Uarch(name, codename, where)
        # GCC's rule for models its table does not list yet
        if family == 0x19:
            return Uarch("Zen 4" if "avx512f" in flags else "Zen 3", None, f"{where}, not in the table: by AVX-512")
        if family == 0x1A and "avx512_vp2intersect" in flags:
            return Uarch("Zen 5", None, f"{where}, not in the table: by AVX512-VP2INTERSECT")
        return f"AMD {where} is not in the table (Zen 1 to Zen 5)"
    if vendor == "GenuineIntel":
        name = INTEL_FAMILY6.get(model) if family == 6 else None
        if name is None:
            return f"Intel {where} is not in the table"
        if model == 0x55:  # one model number for three server generations
            name = ("Cooper Lake" if "avx512_bf16" in flags else
                    "Cascade Lake" if "avx512_vnni" in flags else "Skylake-SP")
            where += ", told apart by AVX-512 BF16/VNNI flags"
        return Uarch(name, None, where)
    return f"vendor {vendor or 'unknown'}: no microarchitecture table"
