"""The Hopper 8-bit GEMM with scales (emitters/cuda/hopper/scaled_gemm.py) on a real sm_90 GPU: FP8 e4m3 and e5m2 and
int8, every scale mode, every output type, tile, split-K, cluster and swapped schedules, M, N and K off the tiles;
each output poisoned first and verified against the float64 reference on fresh random inputs, twice (the split-K
counters reset between launches); and through ``tracea.ops.scaled_gemm`` on torch tensors."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.kernels import ScaledGemm, relative_error, tolerance
from tracea.kernels.dtypes import to_float64

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("kernel_cache", "hopper_gpu")]

VARIANT = "cuda-wgmma.scaled_gemm"


class NoReport:
    nvidia = None


def _result(op, out):
    return out.astype(np.float64) if op.out_dtype.value in ("fp32", "int32") else to_float64(out, op.out_dtype)


def _check(op, sched):
    from tracea.emitters import cuda

    k = cuda.build(op, VARIANT, sched, NoReport())
    for seed in (3, 4):
        inputs = op.random_inputs(np.random.default_rng(seed))
        poison = {"bf16": 0x7FC0, "int32": 0x7FFFFFFF, "fp8e4m3": 0x7F, "fp8e5m2": 0x7F}.get(op.out_dtype.value, np.nan)
        out = np.full(op.output_shape(), poison, op.out_dtype.storage)  # every element must be written
        if op.fp8_out:
            inputs["scale_out"] *= np.float32(1 if seed == 3 else 64)  # the second saturates part of C
            inputs["amax"][:] = -1.0  # written by the launch, not raised from what was there
        k(inputs, out)
        err = relative_error(_result(op, out), op.reference(inputs))
        assert err <= tolerance(op), (op.case_label(), sched.name, seed, err)
        assert op.side_problem(inputs) is None, (op.case_label(), sched.name, seed, op.side_problem(inputs))
    assert k.artifact.metadata["resources"]["spills"] == 0


def _w(**kw):
    from tracea.emitters.cuda.hopper.schedule import WgmmaSchedule

    return WgmmaSchedule(**kw)


@pytest.mark.parametrize("dtype", ["fp8e4m3", "fp8e5m2"])
@pytest.mark.parametrize("scale,out", [("tensor", "bf16"), ("row", "fp16"), ("row", "fp32"), ("block128", "bf16")])
@pytest.mark.parametrize("form", ["tile", "split", "swap", "narrow", "wide"])
def test_fp8_modes_match_the_reference(dtype, scale, out, form):
    """(K 1040: 9 k steps, an odd count for the two product sets' pairs; block128's 1024: 8. "wide": 128 x 256 in
    two column parts, its second tile 8 columns wide, so a part lies past N.)"""
    m = 16 if form == "swap" else 200
    if form == "swap" and scale == "block128":
        pytest.skip("block128 runs unswapped tiles")
    op = ScaledGemm(m, 264, 1024 if scale == "block128" else 1040, dtype, out, scale)
    store = "tma" if out != "fp32" else "direct"
    sched = {"tile": _w(bm=128, bn=128, stages=6, consumers=2, store=store),
             "split": _w(bm=128, bn=128, stages=5, consumers=2, store=store, split=3),
             "swap": _w(bm=64, bn=16, stages=8, consumers=1, store=store, swap=True, split=0),
             "narrow": _w(bm=64, bn=64, stages=8, consumers=1, store=store),
             "wide": _w(bm=128, bn=256, stages=4, consumers=2, store=store, split=2 if out == "fp32" else 1)}[form]
    _check(op, sched)


@pytest.mark.parametrize("scale,out", [("none", "int32"), ("row", "bf16"), ("tensor", "fp32")])
@pytest.mark.parametrize("form", ["wide", "tile", "swap", "cluster"])
def test_int8_modes_match_the_reference(scale, out, form):
    op = ScaledGemm(24 if form == "swap" else 260, 200, 1040, "int8", out, scale)
    store = "tma" if out == "bf16" else "direct"
    sched = {"wide": _w(bm=128, bn=256, stages=4, consumers=2, store=store),
             "tile": _w(bm=64, bn=128, stages=6, consumers=1, store=store),
             "swap": _w(bm=64, bn=24, stages=8, consumers=1, store=store, swap=True),
             "cluster": _w(bm=128, bn=128, stages=6, consumers=2, store=store, cluster=2)}[form]
    _check(op, sched)


def test_the_heroes_of_the_suites_match_the_reference():
    from tracea.emitters.cuda.hopper import scaled_gemm

    for op in (ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "row"), ScaledGemm(16, 4096, 14336, "fp8e4m3", "bf16", "row"),
               ScaledGemm(128, 4096, 4096, "fp8e4m3", "bf16", "row"), ScaledGemm(128, 4096, 4096, "int8", "int32", "none"),
               ScaledGemm(128, 4096, 4096, "fp8e4m3", "bf16", "block128"),
               ScaledGemm(1024, 4096, 4096, "fp8e4m3", "bf16", "block128"), ScaledGemm(640, 1024, 1040, "fp8e4m3", "bf16",
                                                                              "row")):
        _check(op, scaled_gemm.hero_schedule(op, 132))


@pytest.mark.parametrize("op,form", [
    (ScaledGemm(1, 4096, 4096, "fp8e4m3", "bf16", "tensor"), None),
    (ScaledGemm(16, 4096, 14336, "fp8e4m3", "fp32", "row"), None),
    (ScaledGemm(5, 520, 1040, "fp8e5m2", "fp16", "tensor", epilogue="bias,gelu,residual"), None),
    (ScaledGemm(9, 1000, 4096, "fp8e4m3", "bf16", "row"), {"warps": 4, "stages": 3, "boxes": 2, "splits": 11}),
    (ScaledGemm(3, 136, 2048, "fp8e4m3", "fp32", "row", epilogue="bias,relu,scale", alpha=0.5),
     {"warps": 8, "stages": 2, "boxes": 4, "splits": 3}),
    # an FP8 C and its amax (the second seed saturates part of it), unsplit, in a cluster and through the workspace
    (ScaledGemm(1, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor"), None),
    (ScaledGemm(16, 4096, 14336, "fp8e4m3", "fp8e4m3", "row", epilogue="bias,gelu"), {"splits": 4}),
    (ScaledGemm(9, 1000, 4096, "fp8e5m2", "fp8e5m2", "row", epilogue="residual"),
     {"warps": 4, "stages": 3, "boxes": 2, "splits": 11}),
    (ScaledGemm(5, 520, 1040, "fp8e4m3", "fp8e4m3", "row"), {"warps": 8, "stages": 2, "boxes": 4, "splits": 3}),
], ids=lambda x: x.case_label() if isinstance(x, ScaledGemm) else str(x))
def test_fp8_decode_on_the_tma_gemv_matches_the_reference(op, form):
    """The planner's hero for FP8 decode (emitters/cuda/gemv_tma.py's m16n8k32 over the byte pairs), and forms that
    split K through the workspace and in a cluster."""
    from tracea.emitters.cuda import cores, gemv_tma, resolve

    core = cores.hero_core(resolve(VARIANT), op)
    assert core.name == "gemv_tma"
    _check(op, gemv_tma.GemvTmaSchedule(**form) if form else core.hero(op, NoReport()))


def test_tracea_ops_scaled_gemm_on_cuda_tensors_runs_the_kernel():
    torch = pytest.importorskip("torch")
    import tracea.ops as ops

    g = torch.Generator(device="cuda").manual_seed(5)
    a = (torch.randn(48, 512, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
    w = (torch.randn(384, 512, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
    sa = torch.rand(48, 1, device="cuda", generator=g) + 0.5
    sb = torch.rand(1, 384, device="cuda", generator=g) + 0.5
    before = ops.stats().get("tracea", 0)
    y = ops.scaled_gemm(a, w.t(), sa, sb, out_dtype=torch.bfloat16)
    assert ops.stats().get("tracea", 0) == before + 1
    want = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    err = float((y.float() - want).norm() / want.norm())
    assert err < 8 * 2.0**-8, err
    ref = (a.double() @ w.double().t()) * sa.double() * sb.double()
    assert float((y.double() - ref).norm() / ref.norm()) < 8 * 2.0**-8
    x8 = torch.randint(-128, 128, (64, 1024), dtype=torch.int8, device="cuda")
    w8 = torch.randint(-128, 128, (256, 1024), dtype=torch.int8, device="cuda")
    assert torch.equal(ops.scaled_gemm(x8, w8.t()), torch._int_mm(x8, w8.t()))


def test_a_repeated_tracea_ops_scaled_gemm_on_cuda_takes_the_prepared_launch():
    """The first call of a signature checks and prepares; later ones launch on their own pointers (no argument
    checks, no reading the scales back), with new values in new tensors of the same signature; a non-finite scale
    on a signature's first call is refused."""
    torch = pytest.importorskip("torch")
    import tracea.ops as ops
    from tracea.doctor.errors import BadInputError

    g = torch.Generator(device="cuda").manual_seed(6)

    def operands():
        a = (torch.randn(64, 256, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
        w = (torch.randn(128, 256, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
        return a, w, torch.rand(64, 1, device="cuda", generator=g) + 0.5, torch.rand(1, 128, device="cuda", generator=g)

    a, w, sa, sb = operands()
    ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="bf16")  # the signature's first call: checked, then prepared
    before = ops.stats()
    for _ in range(3):
        a, w, sa, sb = operands()
        y = ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="bf16")
        want = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        assert float((y.float() - want).norm() / want.norm()) < 8 * 2.0**-8
    after = ops.stats()
    assert after.get("fast_path", 0) == before.get("fast_path", 0) + 3  # each a prepared launch
    assert after.get("tracea", 0) == before.get("tracea", 0) + 3 and after.get("fallbacks", 0) == before.get("fallbacks", 0)
    a, w, sa, sb = operands()
    with pytest.raises(BadInputError, match="non-finite"):  # a new signature (fp16 out): checked, refused
        ops.scaled_gemm(a, w.t(), sa * float("nan"), sb, out_dtype="fp16")
    # host scales beside the GPU's operands (a number, a NumPy array): moved to the device, not prepared
    y = ops.scaled_gemm(a, w.t(), 0.5, sb.cpu().numpy().reshape(-1), out_dtype="bf16")
    want = torch._scaled_mm(a, w.t(), scale_a=torch.full((64, 1), 0.5, device="cuda"), scale_b=sb,
                            out_dtype=torch.float32)
    assert float((y.float() - want).norm() / want.norm()) < 8 * 2.0**-8
    # a strided A (a column slice) is copied as the kernels read A densely, and matches
    wide = (torch.randn(64, 384, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
    y = ops.scaled_gemm(wide[:, :256], w.t(), sa, sb, out_dtype="bf16")
    want = torch._scaled_mm(wide[:, :256].contiguous(), w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    assert float((y.float() - want).norm() / want.norm()) < 8 * 2.0**-8


def test_tracea_ops_scaled_gemm_fuses_bias_and_residual_on_cuda_through_the_prepared_launch():
    """bias, gelu, residual in the kernel: the first call checked, later ones prepared with each call's own bias and
    residual (new values in new tensors), each against torch's product with the same chain after it."""
    torch = pytest.importorskip("torch")
    import tracea.ops as ops

    g = torch.Generator(device="cuda").manual_seed(7)

    def operands():
        a = (torch.randn(200, 512, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
        w = (torch.randn(384, 512, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(200, 1, device="cuda", generator=g) + 0.5, torch.rand(1, 384, device="cuda", generator=g)
        bias = (torch.randn(384, device="cuda", generator=g) * 500).to(torch.bfloat16)
        residual = (torch.randn(200, 384, device="cuda", generator=g) * 500).to(torch.bfloat16)
        return a, w, sa, sb, bias, residual

    before = None
    for i in range(4):
        a, w, sa, sb, bias, residual = operands()
        y = ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="bf16", bias=bias, residual=residual,
                            epilogue="bias,gelu,residual")
        before = ops.stats() if i == 0 else before
        prod = (a.double() @ w.double().t()) * sa.double() * sb.double() + bias.double()
        want = torch.nn.functional.gelu(prod, approximate="tanh") + residual.double()
        assert float((y.double() - want).norm() / want.norm()) < 8 * 2.0**-8, i
    assert ops.stats().get("fast_path", 0) == before.get("fast_path", 0) + 3  # each later call a prepared launch


def test_tracea_ops_fp8_decode_runs_the_tma_gemv_through_the_prepared_launch():
    """FP8 of 1 and 16 rows through tracea.ops (the TMA gemv, emitters/cuda/gemv_tma.py): per-tensor and row scales,
    a fused bias, each later call prepared on its own tensors; against torch's product."""
    torch = pytest.importorskip("torch")
    import tracea.ops as ops

    g = torch.Generator(device="cuda").manual_seed(8)
    for m, per_row in ((1, False), (16, True)):
        before = None
        for i in range(3):
            a = (torch.randn(m, 4096, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
            w = (torch.randn(1024, 4096, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
            sa = torch.rand(m, 1, device="cuda", generator=g) + 0.5 if per_row else torch.rand(1, device="cuda") + 0.5
            sb = torch.rand(1, 1024, device="cuda", generator=g) + 0.5 if per_row else torch.rand(1, device="cuda") + 0.5
            bias = (torch.randn(1024, device="cuda", generator=g) * 500).to(torch.bfloat16)
            y = ops.scaled_gemm(a, w.t(), sa, sb, out_dtype="bf16", bias=bias)
            before = ops.stats() if i == 0 else before
            want = (a.double() @ w.double().t()) * sa.double() * sb.double().reshape(1, -1) + bias.double()
            assert float((y.double() - want).norm() / want.norm()) < 8 * 2.0**-8, (m, i)
        assert ops.stats().get("fast_path", 0) == before.get("fast_path", 0) + 2, m


@pytest.mark.parametrize("op,form", [
    (ScaledGemm(256, 384, 512, "fp8e4m3", "fp8e4m3", "tensor"), {}),
    (ScaledGemm(131, 250, 768, "fp8e4m3", "fp8e5m2", "row", epilogue="bias,relu"), {}),
    (ScaledGemm(129, 333, 512, "fp8e5m2", "fp8e4m3", "row"), {}),
    (ScaledGemm(300, 520, 2048, "fp8e4m3", "fp8e4m3", "row"), {"split": 2}),
    (ScaledGemm(384, 256, 1024, "fp8e4m3", "fp8e4m3", "block128"), {}),
    (ScaledGemm(200, 264, 1040, "fp8e4m3", "fp8e4m3", "tensor", epilogue="residual"), {"cluster": 2}),
    (ScaledGemm(5, 4096, 4096, "fp8e4m3", "fp8e4m3", "tensor"), {"bm": 64, "bn": 8, "stages": 8, "consumers": 1,
                                                                  "swap": True, "split": 0}),
    (ScaledGemm(256, 384, 512, "fp8e4m3", "fp8e4m3", "row", epilogue="bias"), {"store": "tma"}),
    (ScaledGemm(300, 1024, 2048, "fp8e5m2", "fp8e4m3", "tensor"), {"store": "tma", "split": 2}),
    (ScaledGemm(384, 512, 1024, "fp8e4m3", "fp8e5m2", "block128"), {"bn": 256, "stages": 4, "store": "tma"}),
    (ScaledGemm(129, 330, 512, "fp8e4m3", "fp8e4m3", "row"), {"store": "tma"}),  # no map: the direct stores
])
def test_fp8_outputs_and_their_amax_match_the_reference(op, form):
    """An FP8 C (hopper/fp8_out.py): quantized by scale_out, rounded and saturated as the reference, and the amax
    written (not raised) by each launch, in every store form."""
    base = {"bm": 128, "bn": 128, "stages": 6, "consumers": 2, "store": "direct"}
    _check(op, _w(**{**base, **form}))


def test_tracea_ops_fp8_output_writes_the_amax_of_each_call_through_the_prepared_launch():
    """tracea.ops.scaled_gemm into float8_e4m3fn with scale_out and amax tensors: C against torch's quantization of
    the float64 product, amax against its largest |v| at every call (a smaller one after a larger: written, not
    kept), later calls prepared on their own tensors; 1 row (the TMA gemv) and 256 (the tiles)."""
    torch = pytest.importorskip("torch")
    import tracea.ops as ops

    g = torch.Generator(device="cuda").manual_seed(11)
    for m in (1, 256):
        before = None
        for i, spread in enumerate((8.0, 2.0, 0.5)):
            a = (torch.randn(m, 1024, device="cuda", generator=g) * spread).to(torch.float8_e4m3fn)
            w = (torch.randn(512, 1024, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
            sa, sb = torch.full((1,), 0.01, device="cuda"), torch.full((1,), 0.02, device="cuda")
            so, amax = torch.full((1,), 40.0, device="cuda"), torch.full((1,), -1.0, device="cuda")
            y = ops.scaled_gemm(a, w.t(), sa, sb, out_dtype=torch.float8_e4m3fn, scale_out=so, amax=amax)
            before = ops.stats() if i == 0 else before
            v = (a.double() @ w.double().t()) * 0.01 * 0.02
            want = (v * 40.0).clamp(-448, 448).float().to(torch.float8_e4m3fn).double()
            assert y.dtype == torch.float8_e4m3fn
            assert float((y.double() - want).norm() / want.norm()) < 2.0**-6, (m, i)
            assert abs(float(amax) - float(v.abs().max())) <= 2.0**-11 * float(v.abs().max()), (m, i, float(amax))
        assert ops.stats().get("fast_path", 0) == before.get("fast_path", 0) + 2, m
