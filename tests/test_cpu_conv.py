"""Conv2d as implicit GEMM, compiled and run on every family this machine can run: NCHW and NHWC,
strides, padding, dilation, groups (depthwise too), bias, 1x1 filters, fp32/fp16/bf16, and a K
(= C/groups x R x S) longer than one K block."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.doctor import probe
from tracea.emitters import cpu
from tracea.kernels import Conv2d, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

HOST = probe()
FAMILIES = ("cpu-avx512", "cpu-avx2-fma", "cpu-portable")

CASES = [
    # n, c, h, w, k, r, s, stride, padding, dilation, groups, bias, dtype
    (1, 3, 7, 7, 8, 3, 3, 1, 1, 1, 1, False, "fp32"),
    (2, 6, 9, 11, 8, 3, 3, 2, (1, 2), (2, 1), 2, True, "fp32"),
    (1, 16, 33, 20, 33, 1, 1, 1, 0, 1, 1, True, "fp32"),
    (3, 8, 12, 10, 8, 3, 3, 1, 1, 1, 8, False, "fp32"),  # depthwise
    (1, 4, 40, 50, 33, 5, 3, (2, 1), 2, 1, 1, True, "fp16"),
    (2, 6, 15, 15, 12, 3, 3, 1, 2, 2, 3, False, "bf16"),
    (1, 128, 8, 9, 16, 3, 3, 1, 1, 1, 1, False, "fp16"),  # K = 1152: fp32 sums in the workspace
    (1, 256, 6, 6, 40, 3, 3, 1, 0, 1, 1, True, "fp32"),  # K = 2304: three K blocks into the output
]


pytestmark = pytest.mark.usefixtures("kernel_cache")  # a fresh binary cache: every kernel really compiled


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])) + f"-g{c[10]}-{c[12]}")
def test_conv2d_matches_the_reference(family, layout, case):
    n, c, h, w, k, r, s, stride, padding, dilation, groups, bias, dtype = case
    v = cpu.resolve(f"{family}.conv2d")
    if v.unmet(HOST, dtype):
        pytest.skip(f"{v.id} cannot run here: {'; '.join(v.unmet(HOST, dtype))}")
    op = Conv2d(n, c, h, w, k, r, s, stride=stride, padding=padding, dilation=dilation, groups=groups,
                layout=layout, bias=bias, dtype=dtype)
    kernel = cpu.build(op, v, cpu.hero_schedule(op, v, HOST), HOST)
    inputs = op.random_inputs(np.random.default_rng())
    out = np.empty(op.output_shape(), op.dtype.storage)
    assert kernel(inputs, out) is out
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), f"{op.signature}: relative error {err:.3g}"
