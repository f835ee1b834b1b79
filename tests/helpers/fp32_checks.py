"""A CPU kernel's fp32 output checked against its op's float64 reference on two fresh random inputs, the output
poisoned with NaN first (an element the kernel does not write fails: ``relative_error`` is infinite for a NaN)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracea.kernels import relative_error, tolerance


def verify_on_fresh_inputs(kernel: Any, op: Any, label: str, rounds: int = 2) -> None:
    rng = np.random.default_rng()
    for _ in range(rounds):
        inputs = op.random_inputs(rng)
        out = np.full(op.output_shape(), np.nan, np.float32)
        kernel(inputs, out)
        err = relative_error(out.astype(np.float64), op.reference(inputs))
        assert err <= tolerance(op), f"{op.signature} {label}: relative error {err:.3g}"
