"""The CPU emitter's variants: instruction family x operation, with what a host needs to run them. The
families are listed here; the operations are the cores' (``cores.CORES``, each core's ``descriptions``),
so an op's core line is its variants too.

Only families whose kernels were compiled, run and verified against the float64 references on the CI
machine are registered in ``VARIANTS`` (tests/test_cpu_*.py re-verify them on every run). NEON is
rendered (``ALL_VARIANTS``) and verified under user-mode emulation where an aarch64 cross compiler and
qemu-aarch64 exist (tests/emitters/cpu/test_cpu_neon.py), but CI has neither and no aarch64 machine has run it, so
the planner is not offered it yet.
"""

from __future__ import annotations

from tracea.doctor.variants import Requirements, Variant

from .core import CpuCore
from .cores import CORES

TOOLCHAIN = ("cc", "gcc", "clang")
X86 = ("x86_64", "amd64")
ARM = ("aarch64", "arm64")

# family -> (machines, isa, fp16 extra isa, priority, description)
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], int, str]] = {
    "cpu-avx512": (X86, ("avx512f", "avx2", "fma"), ("f16c",), 30,
                   "AVX-512 broadcast-FMA micro-kernel, 32 zmm registers"),
    "cpu-avx2-fma": (X86, ("avx2", "fma"), ("f16c",), 20, "AVX2+FMA broadcast-FMA micro-kernel, 16 ymm registers"),
    "cpu-neon": (ARM, ("neon",), (), 20, "NEON fmla micro-kernel, 32 q registers"),
    "cpu-portable": ((), (), (), 10, "portable C11, register-blocked scalar code"),
}
REGISTERED_FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")
# family -> what it needs beside its own ISA to compute 8-bit inputs: AVX-512's kernel is VNNI's vpdpbusd (a host
# with AVX-512 but no VNNI, a Skylake-X, runs the AVX2 family's 16-bit multiply-adds)
INT8_ISA: dict[str, tuple[str, ...]] = {"cpu-avx512": ("avx512bw", "avx512vl", "avx512vnni")}
INT8_TEXT = {"cpu-avx512": "AVX-512 VNNI vpdpbusd, 32 zmm registers",
             "cpu-avx2-fma": "AVX2 vpmaddwd on operands widened to 16 bits, 16 ymm registers"}


def make_variant(family: str, op: str, core: CpuCore) -> Variant:
    """The variant of ``family`` for ``op``: the family's requirements, the op's core's description."""
    machines, isa, fp16_isa, priority, text = FAMILIES[family]
    extra = {"fp16": fp16_isa, "int8": INT8_ISA.get(family, ())}
    if "int8" in core.precisions:
        text = INT8_TEXT.get(family, "int32 multiply-adds in plain C, vectorised by the compiler")
        how = "int8 products summed in int32, scaled in fp32"
    else:
        how = "16-bit inputs converted to fp32 when packed, fp32 accumulation, output rounded back"
    return Variant(
        id=f"{family}.{op}", op=op, backend="cpu", family=family, precisions=core.precisions,
        requirements=Requirements(machine=machines, isa=isa, toolchain=TOOLCHAIN),
        precision_requirements={p: Requirements(isa=extra[p]) for p in core.precisions if extra.get(p)},
        priority=priority, description=f"{core.descriptions[op]}; {text}; {how}",
    )


# every family runs every op that has a core (cores/), in the registry's order
ALL_VARIANTS: tuple[Variant, ...] = tuple(make_variant(f, op, core) for f in FAMILIES for op, core in CORES.items())
VARIANTS: tuple[Variant, ...] = tuple(v for v in ALL_VARIANTS if v.family in REGISTERED_FAMILIES)


def resolve(variant: Variant | str) -> Variant:
    """A Variant from itself or its id ("cpu-avx512.gemm"), registered or only renderable."""
    if isinstance(variant, Variant):
        return variant
    found = next((v for v in ALL_VARIANTS if v.id == variant), None)
    if found is None:
        from tracea.doctor.errors import BadInputError

        raise BadInputError(f"variant: unknown CPU variant {variant!r}; known: {', '.join(v.id for v in ALL_VARIANTS)}")
    return found
