"""``tracea VERB gemm``: its flags, its help line and the Gemm they make (op_options.py finds this module by
its name). Only Typer is imported here; the IR when a command runs."""

from __future__ import annotations

from typing import Any

from .op_options import DTYPE, option
from .validate import FINITE, SIZE

ORDER = 0  # its commands' place among the ops' in a verb's help
HELP = "C = epilogue(A @ B), A m x k, B k x n."
PARAMS = [
    option("m", int, ..., "--m", help="Rows of A and C.", domain=SIZE),
    option("n", int | None, None, "--n", help="Columns of B and C (default: m).", domain=SIZE),
    option("k", int | None, None, "--k", help="The reduction size (default: m).", domain=SIZE),
    DTYPE,
    option("layout_a", str, "row", "--layout-a", help="A is m x k 'row'-major or 'col'-major."),
    option("layout_b", str, "row", "--layout-b", help="B is k x n 'row'-major or 'col'-major."),
    option("epilogue", str, "", "--epilogue", help="Fused ops in order, comma-separated: bias,relu,gelu,scale,residual."),
    option("alpha", float, 1.0, "--alpha", help="The factor of the 'scale' epilogue.", domain=FINITE),
]


def make_op(values: dict[str, Any]) -> Any:
    """The Gemm IR value from the parsed flags: --n and --k left out (None) mean m; 0 never does (the domain
    rejects it)."""
    from tracea.kernels import Gemm

    m = values["m"]
    return Gemm(m=m, n=m if values["n"] is None else values["n"], k=m if values["k"] is None else values["k"],
                dtype=values["dtype"], layout_a=values["layout_a"], layout_b=values["layout_b"],
                epilogue=values["epilogue"], alpha=values["alpha"])
