"""torch.compile(backend="tracea") on CPU torch: same output as eager, the report names the swapped nodes,
autograd graphs are left alone, the name is discoverable."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tracea.ops import compile_backend as cb  # noqa: E402

FAST = cb.make_backend(inductor=False)  # the rewritten graph as Python: no C++ compile per test


class MLP(torch.nn.Module):
    """Llama-style: down(silu(x @ W_gate) * (x @ W_up))."""

    def __init__(self, d: int = 96, h: int = 160) -> None:
        super().__init__()
        self.wg = torch.nn.Parameter(torch.randn(d, h) / d**0.5)
        self.wu = torch.nn.Parameter(torch.randn(d, h) / d**0.5)
        self.wd = torch.nn.Parameter(torch.randn(h, d) / h**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (F.silu(x @ self.wg) * (x @ self.wu)) @ self.wd


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 4, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.c2(torch.relu(self.c1(x)))
        return torch.softmax(y.flatten(1), dim=-1)


def _compiled(model: object, backend: object = FAST) -> object:
    torch._dynamo.reset()
    return torch.compile(model, backend=backend)


def _kinds(report: dict) -> list[str]:
    return [line.rsplit("tracea::", 1)[1] for line in report["replaced"]]


def test_mlp_matches_eager_and_reports_matmuls() -> None:
    torch.manual_seed(1)
    model, x = MLP(), torch.randn(2, 24, 96)  # (B, S, D): the gemms take B * S rows
    import tracea

    with torch.no_grad():
        want = model(x)
        compiled = _compiled(model)
        tracea.ops.clear_cache()
        got = compiled(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
    report = cb.last_report()
    assert report["untouched"] is None and report["compiler"] == "python"
    assert _kinds(report) == ["matmul", "matmul", "matmul"]
    assert tracea.ops.stats()["tracea"] == 3, tracea.ops.stats()


def test_mlp_runs_tracea_kernels() -> None:
    """2-D activations reach the gemm kernel (not only the fallback)."""
    import tracea

    torch.manual_seed(2)
    model, x = MLP(64, 128), torch.randn(48, 64)
    tracea.ops.clear_cache()
    with torch.no_grad():
        got = _compiled(model)(x)
        want = model(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert tracea.ops.stats()["tracea"] >= 3


def test_convnet_matches_eager_and_reports_convs_and_softmax() -> None:
    torch.manual_seed(3)
    model, x = ConvNet(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        want = model(x)
        got = _compiled(model)(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()
    assert sorted(_kinds(cb.last_report())) == ["conv2d", "conv2d", "softmax"]


def test_linear_and_sdpa_are_swapped() -> None:
    torch.manual_seed(4)
    lin = torch.nn.Linear(32, 64)

    def f(x: torch.Tensor) -> torch.Tensor:
        q = lin(x).view(1, 2, 32, 32)
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)

    import tracea

    x = torch.randn(32, 32)  # -> q (1, 2, 32, 32)
    with torch.no_grad():
        want = f(x)
        compiled = _compiled(f)
        tracea.ops.clear_cache()
        got = compiled(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    assert sorted(_kinds(cb.last_report())) == ["attention", "linear"]
    assert tracea.ops.stats()["tracea"] == 2, tracea.ops.stats()  # both ran a kernel, neither fell back


def test_unsupported_options_are_kept() -> None:
    def f(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(x, x, x, attn_mask=m)

    x, m = torch.randn(1, 2, 8, 16), torch.zeros(8, 8)
    with torch.no_grad():
        assert torch.allclose(_compiled(f)(x, m), f(x, m), atol=1e-5)
    report = cb.last_report()
    assert report["replaced"] == [] and len(report["kept"]) == 1


def test_grad_requiring_input_leaves_graph_untouched() -> None:
    torch.manual_seed(5)
    model, x = MLP(32, 64), torch.randn(8, 32, requires_grad=True)
    got = _compiled(model)(x)
    report = cb.last_report()
    assert report["replaced"] == [] and "autograd" in report["untouched"]
    got.sum().backward()
    assert x.grad is not None and model.wg.grad is not None
    x2 = x.detach().clone().requires_grad_(True)
    model(x2).sum().backward()
    assert torch.allclose(x.grad, x2.grad, rtol=1e-4, atol=1e-5)


def test_backend_name_is_discoverable_and_inductor_compiles() -> None:
    import tracea

    tracea.ops.register_compile_backend()
    assert "tracea" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("tracea") is cb.tracea_backend
    torch.manual_seed(6)
    model, x = MLP(32, 64), torch.randn(16, 32)
    with torch.no_grad():
        got = _compiled(model, "tracea")(x)
        want = model(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    report = tracea.ops.last_report()
    assert _kinds(report) == ["matmul", "matmul", "matmul"]
    assert report["compiler"] in ("inductor",) or report["compiler"].startswith("python (Inductor failed")


def test_entry_point_is_declared() -> None:
    from importlib.metadata import entry_points

    eps = entry_points(group="torch_dynamo_backends")
    assert "tracea" in eps.names
    assert eps["tracea"].load() is cb.tracea_backend


def test_symbolic_trace_modules_and_methods_are_swapped() -> None:
    """An fx.symbolic_trace graph keeps nn.Conv2d as call_module and x.softmax as call_method."""
    import tracea

    class Net(ConvNet):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c2(torch.relu(self.c1(x))).softmax(-1)

    torch.manual_seed(7)
    model, x = Net(), torch.randn(1, 3, 12, 12)
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        report = cb.rewrite(gm, [x])
        tracea.ops.clear_cache()
        got, want = gm(x), model(x)
    assert sorted(_kinds(report)) == ["conv2d", "conv2d", "softmax"]
    assert not any(n.op == "call_module" for n in gm.graph.nodes)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    assert tracea.ops.stats()["tracea"] == 3, tracea.ops.stats()
