"""The named suites of `tracea bench` (each op's ``suites``, gathered by kernels/workloads.py, and each backend's
suite.py)."""

from __future__ import annotations

import pytest

from tracea.doctor.errors import BadInputError
from tracea.emitters import registry
from tracea.kernels import Suite
from tracea.kernels import workloads as w
from tracea.kernels.ops import conv2d, gemm, softmax


def test_the_llm_suite_is_every_projection_at_every_token_count():
    ops = gemm.llm_gemms("bf16")
    assert len(ops) == len(gemm.TOKENS) * len(gemm.PROJECTIONS) == 25
    assert {(o.m, o.n, o.k) for o in ops} >= {(1, 4096, 4096), (8192, 4096, 14336), (16, 11008, 4096)}


def test_resnet50_lists_each_distinct_convolution_once():
    assert len(conv2d.RESNET50) == len(set(conv2d.RESNET50)) == 23
    ops = conv2d.resnet50_convs("fp16", batches=(1,))
    out = {(o.k, o.output_shape()[1]) for o in ops}  # (channels, height) each conv writes
    # the network's stages: 112 after the stem, then 56, 28, 14, 7 with 256/512/1024/2048 channels out
    assert {(64, 112), (256, 56), (512, 28), (1024, 14), (2048, 7)} <= out
    # each stage's input is some conv's output: a stage whose 3x3 reads a size no conv writes is a typo
    heights = {o.output_shape()[1] for o in ops} | {224}
    assert {o.h for o in ops} <= heights


def test_softmax_rows_cover_attention_and_vocabulary():
    ops = softmax.softmax_rows("fp16")
    assert [o.cols for o in ops[:5]] == list(softmax.ATTENTION_COLS) and all(o.rows * o.cols == 1 << 24 for o in ops[:5])
    assert {o.cols for o in ops[5:]} == {32000, 128256}


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
@pytest.mark.parametrize("quick", [False, True])
def test_every_backend_offers_every_suite_it_has_rows_for(name, quick):
    suites = registry.backend(name).suites(quick)
    assert list(w.named()) == ["llm-gemm", "llm-gemm-int8", "llm-gemm-fp8", "resnet50", "softmax"]
    # 8-bit GEMMs where a variant computes them (int8 on a CPU and CUDA's Hopper core, FP8 on that core only); the
    # rest everywhere
    assert list(suites) == {"cpu": ["llm-gemm", "llm-gemm-int8", "resnet50", "softmax"],
                            "cuda": list(w.named()), "hip": ["llm-gemm", "resnet50", "softmax"],
                            "metal": ["llm-gemm", "resnet50", "softmax"]}[name]
    assert all(suites.values())
    if quick:  # a few rows: what CI runs
        assert sum(map(len, suites.values())) <= 14


def test_an_unknown_suite_is_bad_input():
    with pytest.raises(BadInputError, match="llm-gemm, llm-gemm-int8, llm-gemm-fp8, resnet50, softmax"):
        w.check_suite("resnet")


def test_each_suite_is_its_op_s_and_sized_for_its_target():
    """A suite lives on its op (a new op's file brings its own), in the ops' order, and each target gets the
    dtypes its users run: fp32 on a CPU, 16-bit on a GPU."""
    from tracea.kernels import OPS

    assert [s.name for cls in OPS.values() for s in cls.suites] == list(w.named())
    for name, suite in w.named().items():
        assert isinstance(suite, Suite) and suite.summary == w.summary()[name]
        kinds = {o.kind for target in ("host", "device") for o in suite.ops(target)}
        assert len(kinds) == 1 and name in {s.name for s in OPS[kinds.pop()].suites}
        if name == "llm-gemm-int8":  # 8-bit inputs: scaled into fp32 on a CPU, the int32 accumulator on a GPU
            assert {(o.dtype.value, o.out_dtype.value) for o in suite.ops("host")} == {("int8", "fp32")}
            assert {(o.dtype.value, o.out_dtype.value, o.scale) for o in suite.ops("device")} == {("int8", "int32", "none")}
            assert min(o.m for o in suite.ops("device")) > 16  # the sizes torch._int_mm takes
            continue
        if name == "llm-gemm-fp8":  # a GPU's only
            assert suite.ops("host") == []
            assert {(o.dtype.value, o.out_dtype.value, o.scale) for o in suite.ops("device")} == {("fp8e4m3", "bf16", "row")}
            continue
        assert {o.dtype.value for o in suite.ops("host")} == {"fp32"}
        assert {o.dtype.value for o in suite.ops("device")} <= {"bf16", "fp16"}
    with pytest.raises(BadInputError, match="no target 'tpu'; choose from host, device"):
        w.named()["softmax"].ops("tpu")
