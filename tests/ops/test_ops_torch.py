"""tracea.ops on CPU torch tensors (skipped where torch is absent, as in CI): every op in fp32, bf16 and fp16
against the float64 references, the torch-only fallbacks (autograd, mixed devices/kinds), channels_last,
TraceaConv2d against nn.Conv2d, and patch_conv2d / unpatch_conv2d round trips."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tracea  # noqa: E402
from tracea.doctor.errors import BadInputError  # noqa: E402
from tracea.kernels import Attention, Conv2d, Gemm, Softmax, relative_error, tolerance  # noqa: E402
from tracea.kernels.dtypes import bf16_to_float32  # noqa: E402

ops = tracea.ops
pytestmark = pytest.mark.usefixtures("kernel_cache")
TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(autouse=True, scope="module")
def _fresh_ops_cache():
    """Kernels and choices of other modules (another TRACEA_HOME) are not this module's."""
    ops.clear_cache()
    yield
    ops.clear_cache()


def _tensors(inputs, dtype):
    """The op's random storage arrays as torch tensors of ``dtype`` (bf16 from its bits, exactly)."""
    out = {}
    for k, v in inputs.items():
        f = bf16_to_float32(v) if dtype == "bf16" else v.astype(np.float32)
        out[k] = torch.from_numpy(np.ascontiguousarray(f)).to(TORCH[dtype])
    return out


def _check(op, inputs, got, dtype):
    assert isinstance(got, torch.Tensor) and got.dtype == TORCH[dtype]
    err = relative_error(got.float().numpy().astype(np.float64), op.reference(inputs))
    assert err <= tolerance(op), (op.signature, err)


def _route_ok():
    route = ops.explain()
    if route.path == "fallback":  # only a dtype this host's CPU does not serve (fp16 without F16C) may fall back
        assert "not served" in route.reason, str(route)
    return route


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_every_op_on_cpu_tensors(dtype):
    rng = np.random.default_rng(0)
    g = Gemm(m=35, n=21, k=18, dtype=dtype, epilogue=("bias", "relu"))
    gi = g.random_inputs(rng)
    t = _tensors(gi, dtype)
    _check(g, gi, ops.gemm(t["a"], t["b"], bias=t["bias"], epilogue="bias,relu"), dtype)
    _route_ok()

    c = Conv2d(n=2, c=5, h=9, w=8, k=6, r=3, s=3, stride=2, padding=1, bias=True, dtype=dtype)
    ci = c.random_inputs(rng)
    t = _tensors(ci, dtype)
    _check(c, ci, ops.conv2d(t["x"], t["weight"], t["bias"], stride=2, padding=1), dtype)
    _route_ok()

    s = Softmax(rows=7, cols=45, dtype=dtype)
    si = s.random_inputs(rng)
    _check(s, si, ops.softmax(_tensors(si, dtype)["x"]), dtype)
    _route_ok()

    a = Attention(batch=1, heads=4, kv_heads=1, seq_q=11, seq_k=17, head_dim=64, causal=True, dtype=dtype)
    ai = a.random_inputs(rng)
    t = _tensors(ai, dtype)
    _check(a, ai, ops.attention(t["q"], t["k"], t["v"], causal=True), dtype)
    _route_ok()


def test_fp32_runs_the_kernel_and_matches_torch():
    x = torch.randn(3, 4, 10, 12)
    w = torch.randn(8, 4, 3, 3)
    got = ops.conv2d(x, w, padding=1)
    assert ops.explain().path == "tracea"
    assert torch.allclose(got, torch.nn.functional.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)


def test_autograd_falls_back_and_still_differentiates():
    x = torch.randn(2, 3, 8, 8)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    y = ops.conv2d(x, w, padding=1)
    route = ops.explain()
    assert route.path == "fallback" and "autograd" in route.reason and "torch.nn.functional.conv2d" in str(route)
    y.sum().backward()
    assert w.grad is not None and w.grad.shape == w.shape
    with torch.no_grad():
        ops.conv2d(x, w, padding=1)
    assert ops.explain().path == "tracea"


def test_torch_fallbacks_and_errors():
    a = torch.randn(6, 4, dtype=torch.float64)
    assert torch.allclose(ops.gemm(a, a.T), a @ a.T)
    assert "float64" in ops.explain().reason
    x = torch.randn(5, 8)[:, ::2]
    assert torch.allclose(ops.softmax(x), x.softmax(-1))
    assert "not contiguous" in ops.explain().reason
    with pytest.raises(BadInputError, match="mixed"):
        ops.gemm(torch.randn(2, 3), np.ones((3, 2), np.float32))


def test_devices_mixed_or_without_a_backend():
    cpu, meta = torch.randn(4, 3), torch.empty(3, 2, device="meta")
    route = ops.explain(ops.gemm, cpu, meta)
    assert route.path == "fallback" and "different devices" in route.reason and "torch.matmul" in str(route)
    route = ops.explain(ops.softmax, torch.empty(4, 5, device="meta"))
    assert route.path == "fallback" and "no Tracea backend runs on meta" in route.reason


def test_channels_last_is_read_in_place():
    conv = torch.nn.Conv2d(6, 5, 3, padding=1).to(memory_format=torch.channels_last)
    x = torch.randn(2, 6, 7, 9).to(memory_format=torch.channels_last)
    with torch.no_grad():
        got = ops.conv2d(x, conv.weight, conv.bias, padding=1)
        want = conv(x)
    assert ops.explain().path == "tracea"
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        out = torch.full_like(want, float("nan")).contiguous(memory_format=torch.channels_last)
        assert ops.conv2d(x, conv.weight, conv.bias, padding=1, out=out) is out
        assert torch.allclose(out, want, rtol=1e-4, atol=1e-4)
        with pytest.raises(BadInputError, match="channels_last"):  # the kernel would write NHWC into NCHW memory
            ops.conv2d(x, conv.weight, conv.bias, padding=1, out=torch.empty_like(want).contiguous())


def test_tracea_conv2d_matches_nn_conv2d():
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), bias=True)
    layer = ops.TraceaConv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), bias=True)
    layer.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 11, 10)
    with torch.no_grad():
        got = layer(x)
        route = ops.explain(layer, x)
    assert route.path == "tracea" and route.variant
    assert torch.allclose(got, ref(x), rtol=1e-4, atol=1e-5)
    y = layer(x)  # grad mode with parameters that require grad: PyTorch's forward, differentiable
    assert y.requires_grad and ops.explain().path == "fallback" and "autograd" in ops.explain().reason
    reflect = ops.TraceaConv2d(4, 6, 3, padding=1, padding_mode="reflect")
    with torch.no_grad():
        reflect(x)
        assert "padding_mode" in ops.explain(reflect, x).reason


def _model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 1, bias=False))


def test_patch_a_model_round_trip():
    model = _model().eval()
    x = torch.randn(2, 3, 13, 11)
    with torch.no_grad():
        want = model(x)
        assert ops.patch_conv2d(model) == 3 and ops.patch_conv2d(model) == 0  # idempotent
        assert all(type(m) is ops.TraceaConv2d for m in model if isinstance(m, torch.nn.Conv2d))
        built = ops.stats().get("tracea", 0)
        got = model(x)
        assert ops.stats()["tracea"] == built + 3
        assert ops.unpatch_conv2d(model) == 3 and ops.unpatch_conv2d(model) == 0
        assert all(type(m) is torch.nn.Conv2d for m in model if isinstance(m, torch.nn.Conv2d))
        again = model(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5) and torch.equal(again, want)


def test_patch_process_wide_round_trip():
    original = torch.nn.Conv2d.forward
    model = _model().eval()
    x = torch.randn(1, 3, 9, 9)
    try:
        assert ops.patch_conv2d() == 1 and ops.patch_conv2d() == 0
        with torch.no_grad():
            got = model(x)
        assert ops.explain().path == "tracea"
    finally:
        assert ops.unpatch_conv2d() == 1 and ops.unpatch_conv2d() == 0
    assert torch.nn.Conv2d.forward is original
    with torch.no_grad():
        assert torch.allclose(got, model(x), rtol=1e-4, atol=1e-5)


def test_attention_fallback_masks_match_the_ir():
    bm = np.array([[True, False, True], [False, True, True], [True, True, False]])
    op = Attention(batch=2, heads=4, kv_heads=1, seq_q=40, seq_k=33, head_dim=64, causal=True, window=(9, 3),
                   block_mask=bm, block_size=(16, 16))
    inputs = op.random_inputs(np.random.default_rng(18))
    q, k, v = (torch.from_numpy(inputs[n].astype(np.float64)) for n in "qkv")
    got = ops.attention(q, k, v, causal=True, window=(9, 3), block_mask=torch.from_numpy(bm), block_size=(16, 16))
    assert ops.explain().path == "fallback" and "scaled_dot_product_attention" in ops.explain().vendor
    assert torch.isfinite(got).all()
    assert np.allclose(got.numpy(), op.reference(inputs), rtol=1e-9, atol=1e-10)


def test_same_padding_matches_torch():
    x = torch.randn(2, 3, 9, 8)
    for kernel in (3, 2, (2, 3)):
        layer = ops.TraceaConv2d(3, 5, kernel, padding="same")
        ref = torch.nn.Conv2d(3, 5, kernel, padding="same")
        ref.load_state_dict(layer.state_dict())
        with torch.no_grad():
            assert torch.allclose(layer(x), ref(x), rtol=1e-4, atol=1e-5), kernel


# ------------------------------------------------------------------------------------------ nn.Linear

def test_tracea_linear_matches_nn_linear_and_reads_the_weight_in_place():
    torch.manual_seed(11)
    plain = torch.nn.Linear(24, 10)
    layer = ops.TraceaLinear(24, 10)
    layer.load_state_dict(plain.state_dict())
    for shape in ((7, 24), (2, 3, 24), (24,), (0, 24)):
        x = torch.randn(*shape)
        with torch.no_grad():
            got, want = layer(x), plain(x)
        assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-5), shape
        if shape != (0, 24):
            route = ops.explain()
            assert route.path == "tracea" and route.op == "gemm", str(route)
    with torch.no_grad():  # the weight (out, in) is the column-major (in, out) operand: no copy, no fallback
        assert ops.explain(layer, torch.randn(5, 24)).path == "tracea"
    y = layer(torch.randn(3, 24))  # grad mode on, the weight requires grad: PyTorch's op, differentiable
    assert ops.explain().path == "fallback" and "autograd" in ops.explain().reason
    y.sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.shape == (10, 24)
    with pytest.raises(BadInputError, match="features"), torch.no_grad():
        layer(torch.randn(3, 23))
    no_bias = ops.TraceaLinear(24, 10, bias=False)
    with torch.no_grad():
        x = torch.randn(4, 24)
        assert torch.allclose(no_bias(x), x @ no_bias.weight.t(), rtol=1e-4, atol=1e-5)


def test_patch_linear_round_trips():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(5, 16)
    with torch.no_grad():
        want = model(x)
        assert ops.patch_linear(model) == 2 and ops.patch_linear(model) == 0
        assert all(type(m) is ops.TraceaLinear for m in model if isinstance(m, torch.nn.Linear))
        before = ops.stats().get("tracea", 0)
        assert torch.allclose(model(x), want, rtol=1e-4, atol=1e-5)
        assert ops.stats()["tracea"] == before + 2
        assert ops.unpatch_linear(model) == 2 and type(model[0]) is torch.nn.Linear
        assert ops.patch_linear() == 1 and ops.patch_linear() == 0  # process-wide
        try:
            assert torch.allclose(model(x), want, rtol=1e-4, atol=1e-5) and ops.explain().path == "tracea"
        finally:
            assert ops.unpatch_linear() == 1 and ops.unpatch_linear() == 0
        assert torch.nn.Linear.forward is not ops.TraceaLinear.forward
    with pytest.raises(Exception, match="plain nn.Linear"):
        ops.TraceaLinear.from_linear(torch.nn.Conv2d(1, 1, 1))


def test_patch_conv2d_can_convert_a_model_to_channels_last():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
    x = torch.randn(1, 3, 9, 9)
    with torch.no_grad():
        want = model(x)
        assert ops.patch_conv2d(model, channels_last=True) == 1
        w = model[0].weight
        assert w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
        got = model(x.contiguous(memory_format=torch.channels_last))
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    ops.unpatch_conv2d(model)
    with pytest.raises(BadInputError, match="channels_last"):
        ops.patch_conv2d(model, channels_last="yes")
    with pytest.raises(BadInputError, match="none was given"):
        ops.patch_conv2d(channels_last=True)


@pytest.mark.parametrize("lens,kw", [((30, 7, 0, 19), {"causal": True}), ((30, 7, 0, 19), {}),
                                     ((20, 20), {}), ((30, 30), {"window": (5, 3)}), ((12, 25), {"causal": True,
                                                                                                  "window": (4, 0)})])
def test_packed_bench_baselines_compute_the_reference(lens, kw):
    """``tracea bench --packed``'s torch baselines (the host one and the device one on CPU tensors, with the
    SDPA-alone extra): entries padded to the capacity, masked where a row could reach the padding (here the
    capacity, 40, is past every entry, so entries of one length are masked too)."""
    from tracea.emitters.baselines import attention as base

    op = Attention(len(lens), 4, 40, 32, seq_k=40, kv_heads=2, seq_lens=lens, packed=True, dtype="fp32", **kw)
    x = op.random_inputs(np.random.default_rng(2))
    ref = op.reference(x)
    assert relative_error(np.asarray(base.host(op, x).run(), np.float64), ref) < 1e-5
    name, run, also = base.device(op, {n: torch.from_numpy(a) for n, a in x.items()}, torch)
    assert relative_error(run().numpy().astype(np.float64), ref) < 1e-5
    assert tuple(also[0][1]().shape) == (op.batch, op.heads, 40, op.head_dim) and "alone" in also[0][0]
