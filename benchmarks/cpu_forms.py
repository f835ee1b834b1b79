"""What the CPU probes share (``probe_cpu_conv_strided.py``, ``probe_cpu_int8_amx.py``): each schedule of an op built,
verified against the float64 reference on one fresh random input, then all timed in alternating blocks
(``timing.interleaved``). Run from the repository root, the probes import it from their own folder."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from tracea.emitters.timing import interleaved


def timed_forms(op: Any, variant: str, forms: dict[str, Any], host: Any, bound: float, **timing: Any) -> dict[str, Any]:
    """{name: timing} of each of ``forms`` (name -> schedule) on ``op``, each first checked to a max-norm relative
    error under ``bound`` (an assertion naming the form)."""
    build = importlib.import_module("tracea.emitters.cpu.build")
    x = op.random_inputs(np.random.default_rng(0))
    out = np.empty(op.output_shape(), op.output_dtype.storage)
    ref = op.reference(x)
    fns = {}
    for name, s in forms.items():
        kernel = build.build(op, variant, s, host)
        kernel(x, out)
        err = float(np.abs(out.astype(np.float64) - ref).max() / np.abs(ref).max())
        assert err < bound, f"{name} {op.signature}: relative error {err}"
        fns[name] = (lambda kernel=kernel: kernel(x, out))
    return interleaved(fns, **timing)
