"""The argument checks the op functions of ``tracea.ops`` share (``_functions/``): real numbers, integer
pairs, the epilogue chain, a matrix's major order, and the IR value a shape the kernels refuse turns into a
fallback."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError

from ._arrays import Arg, shown
from ._engine import Fallback


def ir(build: Any) -> Any:
    """The op's IR value; a shape the IR refuses is a fallback (the vendor call may still take it)."""
    try:
        return build()
    except BadInputError as exc:
        raise Fallback(f"the kernels do not take this shape ({exc.message})") from None


def transposed_dense(arg: Arg) -> Any | None:
    """``arg``'s transpose when that is dense row-major (a column-major matrix), else None."""
    t = arg.obj.T
    return t if (t.flags.c_contiguous if arg.kind == "numpy" else t.is_contiguous()) else None


def major(name: str, arg: Arg) -> tuple[str, Any]:
    if (arg.obj.flags.c_contiguous if arg.kind == "numpy" else arg.obj.is_contiguous()):
        return "row", arg.obj
    t = transposed_dense(arg)
    if t is None:
        raise Fallback(f"{name} is neither row- nor column-major (a strided view); call .contiguous() first")
    return "col", t


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None: a real number (not a bool) that stays finite as a float (an
    integer past float's range does not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def alpha_value(alpha: Any) -> float:
    f = finite(alpha)
    if f is None:
        raise BadInputError(f"alpha: expected a finite real number, got {shown(alpha)}", "e.g. alpha=0.5")
    return f


def chain(epilogue: str | Sequence[str] | None, given: dict[str, bool], alpha: float) -> tuple[str, ...]:
    from tracea.kernels.epilogue import VOCABULARY

    if epilogue is not None and not isinstance(epilogue, str) and not (
            isinstance(epilogue, Sequence) and all(isinstance(e, str) for e in epilogue)):
        raise BadInputError(f"epilogue: expected a comma-separated string or a list of names, got {shown(epilogue)}",
                            'e.g. epilogue="bias,gelu" or epilogue=["bias", "gelu"]')
    if epilogue is None:
        chain = [*(["bias"] if given["bias"] else []), *(["scale"] if alpha != 1.0 else []),
                 *(["residual"] if given["residual"] else [])]
        return tuple(chain)
    chain = [e.strip() for e in (epilogue.split(",") if isinstance(epilogue, str) else epilogue) if e.strip()]
    unknown = [e for e in chain if e not in VOCABULARY]
    if unknown:
        raise BadInputError(f"epilogue: unknown op {shown(unknown[0], 40)}; known: {', '.join(VOCABULARY)}",
                            'e.g. epilogue="bias,gelu"')
    if alpha != 1.0 and "scale" not in chain:  # else alpha would be silently ignored
        raise BadInputError(f"epilogue: alpha={alpha:g} is given but scale is not named in the chain "
                            f"({','.join(chain)})", 'name scale where alpha applies, e.g. epilogue="scale,relu"')
    for operand, present in given.items():
        if present != (operand in chain):
            raise BadInputError(f"epilogue: {operand} is {'given' if present else 'named'} but "
                                f"{'not named in the chain' if present else 'not given'} ({','.join(chain)})",
                                f"pass {operand}=... and name it in epilogue, or neither")
    return tuple(chain)


def pair(name: str, v: Any, low: int = 1) -> tuple[int, int]:
    """An integer or a pair of integers, each from ``low`` (strides and dilations 1, paddings 0) to 2**31 - 1
    (the IR's largest size)."""
    def one(x: Any) -> int:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not low <= int(x) < 2**31:
            raise BadInputError(f"{name}: expected integers from {low} to 2**31 - 1, got {shown(v)}",
                                f"e.g. {name}={max(low, 1)} or {name}=({max(low, 1)}, 2)")
        return int(x)

    if isinstance(v, (tuple, list)) and len(v) == 2:
        return one(v[0]), one(v[1])
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return one(v), one(v)
    raise BadInputError(f"{name}: expected an integer or a pair, got {shown(v)}", f"e.g. {name}=1 or {name}=(1, 2)")
