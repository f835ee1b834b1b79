"""``tracea VERB conv2d``: its flags, its help line and the Conv2d they make (op_options.py finds this module
by its name). Only Typer is imported here; the IR when a command runs."""

from __future__ import annotations

from typing import Any

from .op_options import DTYPE, option
from .validate import COUNT, NON_NEGATIVE, SIZE

ORDER = 2  # its commands' place among the ops' in a verb's help
HELP = "2-D convolution as implicit GEMM."
PARAMS = [
    option("n", int, 1, "--n", help="Batch size.", domain=SIZE),
    option("c", int, ..., "--c", help="Input channels.", domain=SIZE),
    option("h", int, ..., "--h", help="Input height.", domain=SIZE),
    option("w", int, ..., "--w", help="Input width.", domain=SIZE),
    option("k", int, ..., "--k", help="Output channels (filters).", domain=SIZE),
    option("r", int, 3, "--r", help="Filter height.", domain=SIZE),
    option("s", int, 3, "--s", help="Filter width.", domain=SIZE),
    option("stride", int, 1, "--stride", help="Stride (both axes).", domain=SIZE),
    option("padding", int, 0, "--padding", help="Zero padding (both axes).", domain=NON_NEGATIVE),
    option("dilation", int, 1, "--dilation", help="Dilation (both axes).", domain=SIZE),
    option("groups", int, 1, "--groups", help="Groups (c and k divisible by it).", domain=COUNT),
    option("layout", str, "nchw", "--layout", help="nchw or nhwc."),
    option("bias", bool, False, "--bias/--no-bias", help="Add a per-channel bias."),
    DTYPE,
]


def make_op(values: dict[str, Any]) -> Any:
    """The Conv2d IR value from the parsed flags."""
    from tracea.kernels import Conv2d

    return Conv2d(**{p.name: values[p.name] for p in PARAMS})
