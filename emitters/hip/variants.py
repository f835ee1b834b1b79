"""The HIP backend's variants (issue 19): what an AMD host needs to run each kernel, for the decision
engine. A variant is an op's core (``cores.CORES``: its family and description) in its family, whose
requirements are listed here; so a new op adds its core line and nothing here.

The MFMA kernels use ``v_mfma_f32_32x32x8f16`` and ``v_mfma_f32_32x32x2f32`` (CDNA1 gfx908 and later) and
``..._bf16_1k`` (CDNA2 and later: gfx908's bf16 MFMAs take two values a lane, not four), so bf16 needs
gfx90a or a CDNA3 target and a gfx908 falls back to fp16. The softmax uses no MFMA.
"""

from __future__ import annotations

from tracea.doctor.variants import Requirements, Variant

from .core import HipCore
from .cores import CORES

CDNA = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942")
BF16_MFMA = ("gfx90a", "gfx940", "gfx941", "gfx942")
TOOLCHAIN = ("hipcc",)

# family -> (precisions, per-precision requirements, priority)
FAMILIES: dict[str, tuple[tuple[str, ...], dict[str, Requirements], int]] = {
    "hip-mfma": (("bf16", "fp16", "fp32"), {"bf16": Requirements(amd_targets=BF16_MFMA)}, 70),
    "hip-simd": (("fp32", "fp16", "bf16"), {}, 50),
}


def make_variant(op: str, core: HipCore) -> Variant:
    """The variant of ``core``'s family for ``op``: every CDNA target, the family's precisions and rank."""
    precisions, per_precision, priority = FAMILIES[core.family]
    return Variant(id=f"{core.family}.{op}", op=op, backend="hip", family=core.family, precisions=precisions,
                   requirements=Requirements(toolchain=TOOLCHAIN, amd_targets=CDNA),
                   precision_requirements=dict(per_precision), priority=priority, description=core.descriptions[op])


VARIANTS: tuple[Variant, ...] = tuple(make_variant(op, core) for op, core in CORES.items())
