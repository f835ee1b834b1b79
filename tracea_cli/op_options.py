"""The operation flags, written once and shared by every verb that names an op (plan, emit, bench,
tune): ``tracea VERB gemm --m M [--n N --k K]``, ``tracea VERB conv2d --n 1 --c 64 ...``,
``tracea VERB softmax --rows R --cols C``, each with ``--dtype``.

Typer reads a command's parameters from its signature, so each verb's command is made by joining the
op's parameters with the verb's own into one ``inspect.Signature``. Only Typer is imported here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from .validate import COUNT, FINITE, NON_NEGATIVE, SIZE, Domain

P = inspect.Parameter


def _opt(name: str, annotation: Any, default: Any, *flags: str, help: str,
         domain: Domain | None = None) -> inspect.Parameter:
    """One keyword parameter for Typer; with a ``domain`` (validate.py) the help says it and parsing checks it."""
    info = (typer.Option(*flags, help=domain.help(help), callback=domain.callback) if domain is not None
            else typer.Option(*flags, help=help))
    return P(name, P.KEYWORD_ONLY, default=default, annotation=Annotated[annotation, info])


DTYPE = _opt("dtype", str, "fp32", "--dtype", help="Element type: fp32, fp16 or bf16 (16-bit inputs accumulate in fp32).")

OP_PARAMS: dict[str, list[inspect.Parameter]] = {
    "gemm": [
        _opt("m", int, ..., "--m", help="Rows of A and C.", domain=SIZE),
        _opt("n", int | None, None, "--n", help="Columns of B and C (default: m).", domain=SIZE),
        _opt("k", int | None, None, "--k", help="The reduction size (default: m).", domain=SIZE),
        DTYPE,
        _opt("layout_a", str, "row", "--layout-a", help="A is m x k 'row'-major or 'col'-major."),
        _opt("layout_b", str, "row", "--layout-b", help="B is k x n 'row'-major or 'col'-major."),
        _opt("epilogue", str, "", "--epilogue", help="Fused ops in order, comma-separated: bias,relu,gelu,scale,residual."),
        _opt("alpha", float, 1.0, "--alpha", help="The factor of the 'scale' epilogue.", domain=FINITE),
    ],
    "conv2d": [
        _opt("n", int, 1, "--n", help="Batch size.", domain=SIZE),
        _opt("c", int, ..., "--c", help="Input channels.", domain=SIZE),
        _opt("h", int, ..., "--h", help="Input height.", domain=SIZE),
        _opt("w", int, ..., "--w", help="Input width.", domain=SIZE),
        _opt("k", int, ..., "--k", help="Output channels (filters).", domain=SIZE),
        _opt("r", int, 3, "--r", help="Filter height.", domain=SIZE),
        _opt("s", int, 3, "--s", help="Filter width.", domain=SIZE),
        _opt("stride", int, 1, "--stride", help="Stride (both axes).", domain=SIZE),
        _opt("padding", int, 0, "--padding", help="Zero padding (both axes).", domain=NON_NEGATIVE),
        _opt("dilation", int, 1, "--dilation", help="Dilation (both axes).", domain=SIZE),
        _opt("groups", int, 1, "--groups", help="Groups (c and k divisible by it).", domain=COUNT),
        _opt("layout", str, "nchw", "--layout", help="nchw or nhwc."),
        _opt("bias", bool, False, "--bias/--no-bias", help="Add a per-channel bias."),
        DTYPE,
    ],
    "softmax": [
        _opt("rows", int, ..., "--rows", help="Rows (softmax is over each row).", domain=SIZE),
        _opt("cols", int, ..., "--cols", help="Columns: the softmax axis.", domain=SIZE),
        DTYPE,
    ],
}
OP_HELP = {
    "gemm": "C = epilogue(A @ B), A m x k, B k x n.",
    "conv2d": "2-D convolution as implicit GEMM.",
    "softmax": "Row-wise softmax, numerically stable.",
}


def make_op(kind: str, values: dict[str, Any]) -> Any:
    """The IR value for ``kind`` from parsed flags (validation errors name the field)."""
    from tracea.kernels import Conv2d, Gemm, Softmax

    if kind == "gemm":
        m = values["m"]  # --n and --k left out (None) mean m; 0 never does (the domain rejects it)
        return Gemm(m=m, n=m if values["n"] is None else values["n"], k=m if values["k"] is None else values["k"], dtype=values["dtype"],
                    layout_a=values["layout_a"], layout_b=values["layout_b"], epilogue=values["epilogue"],
                    alpha=values["alpha"])
    if kind == "conv2d":
        return Conv2d(**{k: values[k] for k in ("n", "c", "h", "w", "k", "r", "s", "stride", "padding", "dilation",
                                                 "groups", "layout", "bias", "dtype")})
    return Softmax(rows=values["rows"], cols=values["cols"], dtype=values["dtype"])


def add_op_commands(group: typer.Typer, verb_params: list[inspect.Parameter],
                    handler: Callable[..., None], verb_help: str) -> None:
    """Add ``gemm``, ``conv2d`` and ``softmax`` commands to ``group``; each calls
    ``handler(op=<IR value>, **verb_values)``."""
    for kind, params in OP_PARAMS.items():
        names = {p.name for p in params}

        def command(__kind: str = kind, __names: set[str] = names, **kwargs: Any) -> None:
            op = make_op(__kind, {k: v for k, v in kwargs.items() if k in __names})
            handler(op=op, **{k: v for k, v in kwargs.items() if k not in __names})

        command.__signature__ = inspect.Signature([*params, *verb_params])  # type: ignore[attr-defined]
        command.__name__ = kind
        command.__doc__ = f"{verb_help} {OP_HELP[kind]}"
        group.command(name=kind)(command)


def option(name: str, annotation: Any, default: Any, *flags: str, help: str,
           domain: Domain | None = None) -> inspect.Parameter:
    return _opt(name, annotation, default, *flags, help=help, domain=domain)
