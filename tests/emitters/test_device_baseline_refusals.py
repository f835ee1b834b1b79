"""A case the device library does not take (``torch._scaled_mm`` wants N and K multiples of 16 and refuses e5m2 x e5m2,
``torch._int_mm`` more than 16 rows) is the baseline's reason in the result, never a crash of the row: in
``bench_on_device`` (the bench's row) and ``vendor_on_device`` (the tuner's worker). CPU stand-ins for the device's
kernel, calls and timings."""

from __future__ import annotations

import numpy as np

from tracea.emitters import device_baselines
from tracea.emitters.timing import Timing
from tracea.kernels import ScaledGemm, tolerance
from tracea.kernels.dtypes import to_storage


def _refuses():
    raise RuntimeError("mat2 shape (1040x136) must be divisible by 16\n(a second line of torch's message)")


def test_a_refused_case_is_the_baselines_reason(monkeypatch):
    op = ScaledGemm(16, 136, 1040, "fp8e4m3", "bf16", "row")
    inputs = op.random_inputs(np.random.default_rng(3))
    ref = op.reference(inputs)
    monkeypatch.setattr(device_baselines, "torch_baseline", lambda op, inputs: device_baselines.GpuBaseline(
        "torch _scaled_mm (cuBLASLt)", _refuses, also=(("_scaled_mm use_fast_accum=True", _refuses),)))

    class StandIn:
        def __call__(self, inputs, out):
            out[...] = to_storage(ref, op.out_dtype)

        def time(self, inputs, warmup, repeats):
            return Timing(4.0, 4.5, 3.9, 10)

    fields = device_baselines.bench_on_device(StandIn(), op, inputs, ref, tolerance(op), 1, 10)
    assert fields["status"] == "ok" and fields["tracea"].p50_ms == 4.0
    assert "baseline" not in fields and "baseline_rel_err" not in fields  # no ratio without a baseline
    assert fields["baseline_reason"] == ("torch _scaled_mm (cuBLASLt) refuses this case: mat2 shape (1040x136) must "
                                         "be divisible by 16")
    assert fields["baseline_name"].endswith("; also tried: _scaled_mm use_fast_accum=True: refuses this case (mat2 "
                                            "shape (1040x136) must be divisible by 16)")
    got = device_baselines.vendor_on_device(op, inputs, ref, 1, 10)
    assert got == {"name": "torch _scaled_mm (cuBLASLt)",
                   "reason": "refuses this case: mat2 shape (1040x136) must be divisible by 16"}
