"""One verdict for a HIP kernel's output, wherever it ran (run_nvidia.py, run_amd.py): its relative error
against the op's float64 reference on the same inputs, and the op's tolerance."""

from __future__ import annotations

from typing import Any


def verdict(op: Any, out: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """{"rel_err", "tolerance", "ok"} of ``out`` (the op's storage array) for ``inputs``."""
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    err = relative_error(to_float64(out, op.output_dtype), op.reference(inputs))
    tol = tolerance(op)
    return {"rel_err": float(err), "tolerance": tol, "ok": bool(err <= tol)}
