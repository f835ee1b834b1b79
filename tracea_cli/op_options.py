"""The operation flags, written once and shared by every verb that names an op (plan, emit, bench,
tune): ``tracea VERB gemm --m M [--n N --k K]``, ``tracea VERB conv2d --n 1 --c 64 ...``,
``tracea VERB softmax --rows R --cols C``, ``tracea VERB attention --batch B --heads H --seq S --head-dim D ...``,
each with ``--dtype``. The design documents' names (``flash_attention_2``) are hidden aliases of their op.

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
    "attention": [
        _opt("batch", int, 1, "--batch", help="Batch size.", domain=SIZE),
        _opt("heads", int, ..., "--heads", help="Query heads.", domain=SIZE),
        _opt("seq", int, ..., "--seq", help="Query length (seq_q).", domain=SIZE),
        _opt("head_dim", int, ..., "--head-dim", help="Head dimension: a multiple of 8 up to 256 (kernels: 64, 128, 256).",
             domain=SIZE),
        _opt("kv_heads", int | None, None, "--kv-heads", help="Key/value heads, dividing --heads (grouped-query; "
             "default: --heads).", domain=SIZE),
        _opt("seq_k", int | None, None, "--seq-k", help="Key length (default: --seq); the causal diagonal is "
             "aligned bottom-right.", domain=SIZE),
        _opt("causal", bool, False, "--causal/--no-causal", help="Mask keys after each query's diagonal."),
        _opt("window", str | None, None, "--window", help="Sliding window L,R: keep keys from L before to R after "
             "the diagonal (or N for N,N)."),
        _opt("block_mask", str | None, None, "--block-mask", help="A .npy file of booleans (q blocks x k blocks), or "
             "a density in (0, 1]: a seeded random map that keeps every diagonal block."),
        _opt("block_size", str, "128", "--block-size", help="The block mask's tile: BQ or BQ,BK."),
        _opt("mask_seed", int, 0, "--mask-seed", help="Seed of a density --block-mask.", domain=NON_NEGATIVE),
        _opt("scale", float | None, None, "--scale", help="Softmax scale (default: 1/sqrt(head dim)).", domain=FINITE),
        DTYPE,
    ],
}
OP_HELP = {
    "gemm": "C = epilogue(A @ B), A m x k, B k x n.",
    "conv2d": "2-D convolution as implicit GEMM.",
    "softmax": "Row-wise softmax, numerically stable.",
    "attention": "Fused scaled dot-product attention (FlashAttention-style), softmax(Q K^T * scale + mask) V.",
}

# The design documents' spellings, as each op's ``aliases`` has them (kernels.ops.OP_ALIASES; spelt out here: the
# app loads no NumPy, so no kernels/; tests/test_attention_cli.py checks the two agree).
OP_ALIASES = {"attention": ("flash_attention_2", "flash-attention-2", "flash_attention")}


def make_op(kind: str, values: dict[str, Any]) -> Any:
    """The IR value for ``kind`` from parsed flags (validation errors name the field)."""
    from tracea.kernels import Conv2d, Gemm, Softmax

    if kind == "attention":
        from .attention_options import make_attention

        return make_attention(values)
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
    """Add ``gemm``, ``conv2d``, ``softmax`` and ``attention`` commands to ``group`` (and each op's aliases,
    hidden); each calls ``handler(op=<IR value>, **verb_values)``."""
    for kind, params in OP_PARAMS.items():
        names = {p.name for p in params}

        def command(__kind: str = kind, __names: set[str] = names, **kwargs: Any) -> None:
            op = make_op(__kind, {k: v for k, v in kwargs.items() if k in __names})
            handler(op=op, **{k: v for k, v in kwargs.items() if k not in __names})

        command.__signature__ = inspect.Signature([*params, *verb_params])  # type: ignore[attr-defined]
        command.__name__ = kind
        command.__doc__ = f"{verb_help} {OP_HELP[kind]}"
        group.command(name=kind)(command)
        for alias in OP_ALIASES.get(kind, ()):
            group.command(name=alias, hidden=True)(command)


def option(name: str, annotation: Any, default: Any, *flags: str, help: str,
           domain: Domain | None = None) -> inspect.Parameter:
    return _opt(name, annotation, default, *flags, help=help, domain=domain)
