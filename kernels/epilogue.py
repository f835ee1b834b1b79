"""The fused epilogue's vocabulary, written once: what each op means, what it reads, what it costs.

A GEMM may end in a chain of element-wise ops applied in order to each output value ``v``. Everything
that speaks of them takes their meaning from ``VOCABULARY``:

- the IR (``ops.Gemm``): validation, FLOP and byte counts, the float64 NumPy reference;
- the baselines (NumPy on the CPU, PyTorch on a GPU) through ``apply`` with an ``ArrayMath`` of their
  library's own primitives;
- each emitter language through one statement table (``emitters/cpu/epilogue.py`` for C with SIMD,
  ``emitters/gpu.py`` for CUDA and HIP), checked by tests to cover every op here.

Adding an op is one entry here, one line in each language table and, where it needs new device code, that
code in the language's prelude.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GELU_C0 = math.sqrt(2.0 / math.pi)
GELU_C1 = 0.044715


@dataclass(frozen=True)
class EpilogueOp:
    """One op of the chain. ``operand``: the extra input it reads ("bias": length n, broadcast over rows;
    "residual": m x n), or None. ``form``: how it combines (``add`` the operand, ``scale`` by alpha, or a
    ``unary`` function of the same name). ``flops``: floating-point operations per output element."""

    name: str
    form: str
    flops: int
    operand: str | None
    summary: str


VOCABULARY: dict[str, EpilogueOp] = {e.name: e for e in (
    EpilogueOp("bias", "add", 1, "bias", "v + bias[col]"),
    EpilogueOp("relu", "unary", 1, None, "max(v, 0)"),
    EpilogueOp("gelu", "unary", 8, None, "tanh approximation, as PyTorch's gelu(approximate='tanh')"),
    EpilogueOp("scale", "scale", 1, None, "v * alpha"),
    EpilogueOp("residual", "add", 1, "residual", "v + residual[row, col]"),
)}
EPILOGUES = tuple(VOCABULARY)


@dataclass(frozen=True)
class ArrayMath:
    """One array library's primitives for the epilogue: ``add(c, x)``, ``mul(c, alpha)`` and each unary
    op by name. A baseline passes its library's fastest forms (in-place NumPy, torch.relu, ...)."""

    add: Callable[[Any, Any], Any]
    mul: Callable[[Any, float], Any]
    unary: Mapping[str, Callable[[Any], Any]]


def gelu_tanh(x: Any, tanh: Callable[[Any], Any]) -> Any:
    """GELU's tanh form for any array type, given its ``tanh``."""
    return 0.5 * x * (1.0 + tanh(GELU_C0 * (x + GELU_C1 * x**3)))


def apply(chain: Sequence[str], c: Any, operands: Mapping[str, Any], alpha: float, lib: ArrayMath) -> Any:
    """``c`` after each op of ``chain`` in order; ``operands`` holds "bias" and "residual" as the chain
    needs them, already shaped to broadcast against ``c``."""
    for name in chain:
        op = VOCABULARY[name]
        if op.form == "add":
            c = lib.add(c, operands[op.operand])
        elif op.form == "scale":
            c = lib.mul(c, alpha)
        else:
            c = lib.unary[name](c)
    return c


def parse_chain(value: Any) -> tuple[str, ...]:
    """An op's ``epilogue`` field ("bias,relu" or a sequence of names) as a tuple of known, distinct op names."""
    from tracea.doctor.errors import BadInputError

    epi = tuple(value.split(",")) if isinstance(value, str) else tuple(value)
    if not all(isinstance(e, str) for e in epi):
        raise BadInputError(f"epilogue: expected op names, got {value!r}")
    epi = tuple(e.strip() for e in epi if e.strip())
    for e in epi:
        if e not in EPILOGUES:
            raise BadInputError(f"epilogue: unknown op {e!r}; choose from {', '.join(EPILOGUES)}")
    if len(set(epi)) != len(epi):
        raise BadInputError(f"epilogue: an op appears twice in {','.join(epi)}")
    return epi


def parse_alpha(value: Any) -> float:
    """An op's ``alpha`` (the ``scale`` op's factor): a finite number."""
    import numpy as np

    from tracea.doctor.errors import BadInputError

    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise BadInputError(f"alpha: expected a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise BadInputError(f"alpha: must be finite, got {value}")
    return float(value)


def flops_per_element(chain: Sequence[str]) -> int:
    return sum(VOCABULARY[e].flops for e in chain)


def statements(chain: Sequence[str], table: Mapping[str, str], **operands: str) -> list[str]:
    """One language's statements for ``chain`` from its ``table`` (op -> statement over ``v``, with
    ``{bias}``/``{residual}`` where the operand's expression goes)."""
    return [table[e].format(**operands) for e in chain]


def _numpy() -> ArrayMath:
    import numpy as np

    return ArrayMath(add=lambda c, x: c + x, mul=lambda c, a: c * a,
                     unary={"relu": lambda c: np.maximum(c, 0.0), "gelu": lambda c: gelu_tanh(c, np.tanh)})


NUMPY = _numpy()  # out-of-place float64 (the IR's reference)
