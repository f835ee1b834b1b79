"""The HIP backend's variants (issue 19): what an AMD host needs to run each kernel, for the decision
engine.

The MFMA kernels use ``v_mfma_f32_32x32x8f16`` and ``v_mfma_f32_32x32x2f32`` (CDNA1 gfx908 and later) and
``..._bf16_1k`` (CDNA2 and later: gfx908's bf16 MFMAs take two values a lane, not four), so bf16 needs
gfx90a or a CDNA3 target and a gfx908 falls back to fp16. The softmax uses no MFMA.
"""

from __future__ import annotations

from tracea.doctor.variants import Requirements, Variant

CDNA = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942")
BF16_MFMA = ("gfx90a", "gfx940", "gfx941", "gfx942")
TOOLCHAIN = ("hipcc",)


def _mfma(op: str, text: str) -> Variant:
    return Variant(id=f"hip-mfma.{op}", op=op, backend="hip", family="hip-mfma", precisions=("bf16", "fp16", "fp32"),
                   requirements=Requirements(toolchain=TOOLCHAIN, amd_targets=CDNA),
                   precision_requirements={"bf16": Requirements(amd_targets=BF16_MFMA)},
                   priority=70, description=text)


VARIANTS: tuple[Variant, ...] = (
    _mfma("gemm", "Matrix Core GEMM: v_mfma_f32_32x32x8 (16-bit) or 32x32x2 (fp32) over 64-lane wavefronts, "
                  "double-buffered LDS, fp32 accumulation, fused epilogue"),
    _mfma("conv2d", "implicit-GEMM NHWC convolution on the Matrix Core GEMM's body"),
    Variant(id="hip-simd.softmax", op="softmax", backend="hip", family="hip-simd", precisions=("fp32", "fp16", "bf16"),
            requirements=Requirements(toolchain=TOOLCHAIN, amd_targets=CDNA), priority=50,
            description="row softmax: a wavefront a row, online max and sum combined through LDS"),
)
