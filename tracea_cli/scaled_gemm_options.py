"""``tracea VERB scaled_gemm``: its flags, its help line and the ScaledGemm they make (op_options.py finds this
module by its name). Only Typer is imported here; the IR when a command runs."""

from __future__ import annotations

from typing import Any

from .op_options import option
from .validate import FINITE, SIZE

ORDER = 1  # its commands' place among the ops' in a verb's help
HELP = ("C = epilogue(scaled(A @ B)), 8-bit A m x k and B (n x k, or k x n with --layout-b row) with fp32 scales: "
        "int8 (int32 accumulation), FP8 e4m3/e5m2.")
# the IR's other spellings of the op (kernels.OP_ALIASES; tests/cli/test_attention_cli.py checks they agree)
ALIASES = ("qgemm", "scaled-gemm")
PARAMS = [
    option("m", int, ..., "--m", help="Rows of A and C.", domain=SIZE),
    option("n", int | None, None, "--n", help="Columns of C: rows of B (default: m).", domain=SIZE),
    option("k", int | None, None, "--k", help="The reduction size (default: m).", domain=SIZE),
    option("dtype", str, "int8", "--dtype", help="A's and B's type: int8, fp8e4m3 or fp8e5m2."),
    option("out_dtype", str, "fp32", "--out-dtype", help="C's type: fp32, bf16, fp16, int32 (int8 with --scale "
                                                        "none: the accumulator itself), or fp8e4m3/fp8e5m2 (FP8 inputs: "
                                                        "C quantized by a scale_out, its amax written)."),
    option("scale", str, "row", "--scale", help="tensor (one scale each), row (A's rows, B's columns), block128 "
                                                "(A 1x128, B 128x128 blocks) or none."),
    option("layout_b", str, "col", "--layout-b", help="B is n x k 'col' (K contiguous: nn.Linear's weight) or k x n "
                                                      "'row'."),
    option("epilogue", str, "", "--epilogue", help="Fused ops on the scaled output, in order, comma-separated: "
                                                   "bias,relu,gelu,scale,residual (bias and residual in C's type)."),
    option("alpha", float, 1.0, "--alpha", help="The factor of the 'scale' epilogue.", domain=FINITE),
]


def make_op(values: dict[str, Any]) -> Any:
    """The ScaledGemm IR value from the parsed flags: --n and --k left out (None) mean m."""
    from tracea.kernels import ScaledGemm

    m = values["m"]
    return ScaledGemm(m=m, n=m if values["n"] is None else values["n"], k=m if values["k"] is None else values["k"],
                      dtype=values["dtype"], out_dtype=values["out_dtype"], scale=values["scale"],
                      layout_b=values["layout_b"], epilogue=values["epilogue"], alpha=values["alpha"])
