"""The epilogue vocabulary (``kernels/epilogue.py``) in C with SIMD: one statement per op over the vector
``v`` of fp32 sums, written in the ISA dialect of ``isa.py`` (``vf_*``; ``vf_gelu`` lives in each ISA's
prelude); the plain-C reference the exported packages check against is ``cstyle.C_REFERENCE``. ``{bias}`` and ``{residual}`` stand for the caller's expressions loading those operands."""

from __future__ import annotations

from tracea.kernels.epilogue import statements

C_SIMD = {
    "bias": "v = vf_add(v, {bias});",
    "relu": "v = vf_max(vf_zero(), v);",  # zero first: max returns its second operand for a NaN, which stays NaN
    "gelu": "v = vf_gelu(v);",
    "scale": "v = vf_mul(v, valpha);",
    "residual": "v = vf_add(v, {residual});",
}

__all__ = ["C_SIMD", "statements"]
