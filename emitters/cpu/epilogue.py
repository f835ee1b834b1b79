"""The epilogue vocabulary (``kernels/epilogue.py``) in C with SIMD: one statement per op over the vector
``v`` of fp32 sums, written in the ISA dialect of ``isa.py`` (``vf_*``; ``vf_gelu`` lives in each ISA's
prelude); the plain-C reference the exported packages check against is ``cstyle.C_REFERENCE``. ``{bias}`` and ``{residual}`` stand for the caller's expressions loading those operands."""

from __future__ import annotations

from tracea.kernels.epilogue import GELU_C0, GELU_C1, statements

C_SIMD = {
    "bias": "v = vf_add(v, {bias});",
    "relu": "v = vf_max(vf_zero(), v);",  # zero first: max returns its second operand for a NaN, which stays NaN
    "gelu": "v = vf_gelu(v);",
    "scale": "v = vf_mul(v, valpha);",
    "residual": "v = vf_add(v, {residual});",
}

# The same ops on one fp32 value ``v`` in plain C (a kernel's scalar store path, e.g. the scaled 8-bit GEMM's):
# ``alpha`` a float in scope, GELU's tanh form in float.
C_SCALAR = {
    "bias": "v += {bias};",
    "relu": "v = v < 0.0f ? 0.0f : v;",  # a NaN stays NaN
    "gelu": f"v = 0.5f * v * (1.0f + tanhf({GELU_C0!r}f * (v + {GELU_C1!r}f * v * v * v)));",
    "scale": "v *= alpha;",
    "residual": "v += {residual};",
}

__all__ = ["C_SCALAR", "C_SIMD", "statements"]
