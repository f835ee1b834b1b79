"""``tracea VERB softmax``: its flags, its help line and the Softmax they make (op_options.py finds this module
by its name). Only Typer is imported here; the IR when a command runs."""

from __future__ import annotations

from typing import Any

from .op_options import DTYPE, option
from .validate import SIZE

ORDER = 3  # its commands' place among the ops' in a verb's help
HELP = "Row-wise softmax, numerically stable."
PARAMS = [
    option("rows", int, ..., "--rows", help="Rows (softmax is over each row).", domain=SIZE),
    option("cols", int, ..., "--cols", help="Columns: the softmax axis.", domain=SIZE),
    DTYPE,
]


def make_op(values: dict[str, Any]) -> Any:
    """The Softmax IR value from the parsed flags."""
    from tracea.kernels import Softmax

    return Softmax(rows=values["rows"], cols=values["cols"], dtype=values["dtype"])
