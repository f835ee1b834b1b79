"""The epilogue vocabulary (``kernels/epilogue.py``) in CUDA C++: one statement per op over the fp32 value
``v`` (``tr_gelu`` lives in the renderer's prelude). ``{bias}`` and ``{residual}`` stand for the caller's
expressions loading those operands (a register, a guarded global load)."""

from __future__ import annotations

from tracea.kernels.epilogue import statements

from ..gpu import EPILOGUE

CUDA = EPILOGUE  # the same statements as HIP: emitters/gpu.py

__all__ = ["CUDA", "statements"]
