"""``tracea.ops.gemm``: its arguments checked, its IR value, its vendor fallback (``fallback``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError
from tracea.kernels.epilogue import NUMPY, apply

from .._arrays import describe
from .._checks import alpha_value, chain, ir, major, transposed_dense
from .._dispatch import prepared, run
from .._engine import Fallback
from .._prepared import MISS, RETRY, Uncached, array_key, opt, out_key
from .._vendor import back, f64, torch_math

ORDER = 10  # its place in tracea.ops (help, __all__)
__all__ = ["gemm"]
# its PyTorch pieces (in _torch/gemm.py, which imports torch), offered by tracea.ops where torch is installed
TORCH_PIECES: tuple[str, ...] = ("TraceaLinear", "patch_linear", "unpatch_linear")


def gemm(a: Any, b: Any, *, bias: Any = None, residual: Any = None, epilogue: str | Sequence[str] | None = None,
         alpha: float = 1.0, out: Any = None) -> Any:
    """``epilogue(a @ b)`` for 2-D ``a`` (m, k) and ``b`` (k, n). ``epilogue``: ops of kernels/epilogue.py in
    order (bias, relu, gelu, scale, residual); by default bias (if given), scale (if alpha != 1), residual
    (if given). A column-major operand (``x.T`` of a dense matrix) is read in place. Batches (``a`` (..., m, k),
    ``b`` (..., k, n), the leading sizes broadcast as in ``numpy.matmul``) take the vendor call."""
    try:
        key = ("gemm", array_key(a), array_key(b), array_key(bias), array_key(residual), opt(epilogue), opt(alpha),
               None if out is None else out_key(out))
    except Uncached:
        key = None
    y = prepared(key, (a, b, bias, residual), out)
    if y is MISS or y is RETRY:
        return _gemm(a, b, bias, residual, epilogue, alpha, out, key if y is MISS else None)
    return y


def _gemm(a: Any, b: Any, bias: Any, residual: Any, epilogue: Any, alpha: Any, out: Any,
          key: tuple[Any, ...] | None) -> Any:
    args = {"a": describe("a", a), "b": describe("b", b)}
    operands = {n: v for n, v in (("bias", bias), ("residual", residual)) if v is not None}
    args |= {n: describe(n, v) for n, v in operands.items()}
    alpha = alpha_value(alpha)
    ash, bsh = args["a"].shape, args["b"].shape
    for name in ("a", "b"):  # a column-major operand is read in place (layout "col"): not a strided view
        if len(args[name].shape) == 2 and not args[name].contiguous and transposed_dense(args[name]) is not None:
            args[name] = dataclasses.replace(args[name], contiguous=True)
    chain_ = chain(epilogue, {"bias": bias is not None, "residual": residual is not None}, alpha)
    if len(ash) < 2 or len(bsh) < 2:
        raise BadInputError(f"gemm: a is {ash} and b is {bsh}: expected matrices (or batches of them)",
                            "a vector v takes v[None, :] (a row) or v[:, None] (a column)")
    if ash[-1] != bsh[-2]:
        raise BadInputError(f"gemm: a is {ash} and b is {bsh}: inner sizes differ",
                            "a is (m, k) and b is (k, n); transpose one with .T")
    try:
        batch = np.broadcast_shapes(ash[:-2], bsh[:-2])
    except ValueError:
        raise BadInputError(f"gemm: a is {ash} and b is {bsh}: the batch sizes do not broadcast",
                            "leading sizes must match or be 1, as in numpy.matmul") from None
    batched = len(ash) != 2 or len(bsh) != 2
    m, n = ash[-2], bsh[-1]
    out_shape = (*batch, m, n)
    for name, want in (("bias", (n,)), ("residual", out_shape)):
        if name in args and args[name].shape != want:
            raise BadInputError(f"gemm: {name} is {args[name].shape}, expected {want}",
                                "bias has one value per output column; residual is the output's shape")

    def plan() -> tuple[Any, dict[str, Any]]:
        from tracea.kernels import Gemm

        if batched:
            raise Fallback(f"a is {len(ash)}-D and b is {len(bsh)}-D; the kernels take 2-D matrices")
        la, fa = major("a", args["a"])
        lb, fb = major("b", args["b"])
        op = ir(lambda: Gemm(m=m, n=n, k=ash[1], dtype=args["a"].dtype, layout_a=la, layout_b=lb, epilogue=chain_,
                              alpha=alpha))
        return op, {"a": fa, "b": fb, **operands}

    vendor = {"numpy": "numpy.matmul in float64 + the epilogue", "torch": "torch.matmul + the epilogue in torch"}
    return run("gemm", args, plan, out, out_shape, lambda: fallback(a, b, chain_, operands, alpha), vendor,
               fast=(key, ("a", "b", "bias", "residual"), (a, b, bias, residual)))




def fallback(a: Any, b: Any, chain: Sequence[str], operands: dict[str, Any], alpha: float) -> Any:
    if isinstance(a, np.ndarray):
        extra = {k: f64(v) for k, v in operands.items()}
        return back(apply(chain, f64(a) @ f64(b), extra, alpha, NUMPY), a)
    return apply(chain, a @ b, operands, alpha, torch_math())


