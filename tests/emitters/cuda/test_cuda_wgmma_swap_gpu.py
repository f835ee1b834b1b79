"""The Hopper GEMM with swapped operands (``WgmmaSchedule.swap``: the kernel computes C^T = B^T A^T and stores C
transposed) on a real sm_90 GPU: batch-1 1x1 convolutions on the GEMM path and GEMMs with ``nn.Linear``'s weight
layout, partial tiles in every dimension, the fused epilogue, the TMA store and the direct one, split-K; each
output poisoned with NaN first and verified against the float64 reference on fresh random inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracea.kernels import Conv2d, Gemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("kernel_cache", "hopper_gpu")]


class NoReport:
    nvidia = None


def _check(op, vid, sched):
    from tracea.emitters import cuda

    k = cuda.build(op, vid, sched, NoReport())
    inputs = op.random_inputs(np.random.default_rng(7))
    out = np.full(op.output_shape(), np.nan if op.dtype.value != "bf16" else 0x7FC0, op.dtype.storage)
    k(inputs, out)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    assert err <= tolerance(op), (sched.name, err)
    res = k.artifact.metadata["resources"]
    assert res["spills"] == 0, res
    return k


CONVS = [Conv2d(1, 1024, 14, 14, 256, 1, 1, layout="nhwc", dtype="fp16"),
         Conv2d(1, 2048, 7, 7, 512, 1, 1, layout="nhwc", dtype="bf16", bias=True),
         Conv2d(1, 72, 5, 7, 80, 1, 1, layout="nhwc", dtype="fp16", bias=True),   # M 35, K 80: partial everywhere
         Conv2d(2, 64, 9, 9, 200, 1, 1, layout="nhwc", dtype="bf16")]


@pytest.mark.parametrize("op", CONVS, ids=lambda op: op.signature[:48])
@pytest.mark.parametrize("bn,store,split", [(8, "tma", 1), (16, "tma", 1), (32, "direct", 1), (56, "tma", 1),
                                            (64, "tma", 1), (16, "tma", 0), (24, "direct", 3)])
def test_swapped_1x1_convs_match_the_reference(op, bn, store, split):
    from tracea.emitters.cuda.hopper.conv_schedule import WgmmaConvSchedule

    sched = WgmmaConvSchedule(bm=64, bn=bn, stages=6, consumers=1, store=store, split=split, swap=True, path="gemm")
    _check(op, "cuda-wgmma.conv2d", sched)


GEMMS = [Gemm(1, 4096, 4096, "bf16", layout_b="col"),
         Gemm(16, 1000, 520, "fp16", layout_b="col", epilogue=("bias", "gelu")),
         Gemm(40, 264, 328, "bf16", layout_b="col", epilogue=("scale", "residual"), alpha=0.5),
         Gemm(130, 136, 88, "fp16", layout_b="col", epilogue=("bias", "relu", "residual"))]


@pytest.mark.parametrize("op", GEMMS, ids=lambda op: op.signature[:48])
@pytest.mark.parametrize("bm,consumers,bn,store", [(64, 1, 16, "tma"), (128, 2, 32, "tma"), (64, 1, 8, "direct")])
def test_swapped_gemms_match_the_reference(op, bm, consumers, bn, store):
    from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule

    sched = WgmmaSchedule(bm=bm, bn=bn, stages=6, consumers=consumers, store=store, swap=True)
    _check(op, "cuda-wgmma.gemm", sched)
    _check(op, "cuda-wgmma.gemm", dataclasses.replace(sched, split=0))  # split-K's fix-up under the swap
