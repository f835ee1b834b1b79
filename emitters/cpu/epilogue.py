"""The epilogue vocabulary (``kernels/epilogue.py``) in C with SIMD: one statement per op over the vector
``v`` of fp32 sums (and ``C_REFERENCE``: plain C in double, for the exported packages' reference), written in the ISA dialect of ``isa.py`` (``vf_*``; ``vf_gelu`` lives in each ISA's
prelude). ``{bias}`` and ``{residual}`` stand for the caller's expressions loading those operands."""

from __future__ import annotations

from tracea.kernels.epilogue import statements

C_SIMD = {
    "bias": "v = vf_add(v, {bias});",
    "relu": "v = vf_max(vf_zero(), v);",  # zero first: max returns its second operand for a NaN, which stays NaN
    "gelu": "v = vf_gelu(v);",
    "scale": "v = vf_mul(v, valpha);",
    "residual": "v = vf_add(v, {residual});",
}

# Plain C in double precision over the scalar ``v`` (``alpha`` a double in scope): the exported packages'
# reference loops (export_example.py), independent of the kernels' SIMD code.
C_REFERENCE = {
    "bias": "v += {bias};",
    "relu": "v = v < 0 ? 0 : v;",  # a NaN stays NaN, as torch.relu and np.maximum keep it
    "gelu": "v = 0.5 * v * (1.0 + tanh(GELU_C0 * (v + GELU_C1 * v * v * v)));",
    "scale": "v *= alpha;",
    "residual": "v += {residual};",
}

__all__ = ["C_REFERENCE", "C_SIMD", "statements"]
