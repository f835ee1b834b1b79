"""The epilogue vocabulary (``kernels/epilogue.py``) in CUDA C++: one statement per op over the fp32 value
``v`` (``tr_gelu`` lives in the renderer's prelude). ``{bias}`` and ``{residual}`` stand for the caller's
expressions loading those operands (a register, a guarded global load)."""

from __future__ import annotations

from tracea.kernels.epilogue import statements

from ..gpu import EPILOGUE

CUDA = EPILOGUE  # the same statements as HIP: emitters/gpu.py


def epilogue_lines(epi: tuple[str, ...], indent: str) -> list[str]:
    """The epilogue's statements over ``v``, the operands already loaded into ``bias_v`` and ``res_v``."""
    return [indent + line for line in statements(epi, CUDA, bias="bias_v", residual="res_v")]


__all__ = ["CUDA", "epilogue_lines", "statements"]
