"""The Metal backend's variants (issue 36): what a Mac needs to run each kernel, for the decision engine. A
variant is an op's core (``cores.CORES``: its family and description) in its family, whose requirements are
listed here; so a new op adds its core file and nothing here.

The requirement is an Apple GPU of family Apple7, Apple8 or Apple9 (the doctor's ``AppleGpu.gpu_family``:
the M1 to M4 series, Apple's Metal feature set tables). ``simdgroup_matrix`` (the GEMM, conv and attention
cores' 8x8 tiles) is an Apple7 feature in those tables, and the kernels use no later one: bf16 is stored as
``ushort`` bits and converted in float arithmetic (no Metal 3.1 ``bfloat``), so every precision runs on every
listed family. An Apple10 GPU (M5) meets the requirement too: Apple's families are cumulative (a GPU of
family N supports every feature of the families below it, ``MTLGPUFamily``), as the runtime's
``supportsFamily(Apple7)`` check says; ``--arch`` offers the three families the kernels were written against.

No toolchain is required at plan time: the runtime compiles the MSL source in the process
(``MTLDevice.newLibraryWithSource:options:error:``, runtime.py), which needs Metal itself, not Xcode's
``xcrun metal``; ``tracea emit`` uses that compiler where it is installed, for the ``.metallib`` file only.
Whether Metal loads in this process is ``Backend.runs_kernels``, not a plan's requirement (a plan is about
the machine).
"""

from __future__ import annotations

from tracea.doctor.variants import Requirements, Variant

from .core import MetalCore
from .cores import CORES

FAMILIES_OF_GPU = ("apple7", "apple8", "apple9")  # Apple GPU families the kernels are written for (--arch)

# variant family -> (precisions, per-precision requirements, priority): the simdgroup-matrix kernels outrank
# the plain-SIMD ones, as HIP's MFMA ones outrank its SIMD ones
FAMILIES: dict[str, tuple[tuple[str, ...], dict[str, Requirements], int]] = {
    "metal-simdgroup": (("bf16", "fp16", "fp32"), {}, 70),
    "metal-simd": (("fp32", "fp16", "bf16"), {}, 50),
}


def make_variant(op: str, core: MetalCore) -> Variant:
    """The variant of ``core``'s family for ``op``: every listed Apple GPU family, the family's precisions and rank."""
    precisions, per_precision, priority = FAMILIES[core.family]
    return Variant(id=f"{core.family}.{op}", op=op, backend="metal", family=core.family, precisions=precisions,
                   requirements=Requirements(apple_families=(*FAMILIES_OF_GPU, "apple10")),
                   precision_requirements=dict(per_precision), priority=priority, description=core.descriptions[op])


VARIANTS: tuple[Variant, ...] = tuple(make_variant(op, core) for op, core in CORES.items())
