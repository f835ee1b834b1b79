"""torch.compile(backend="tracea") on CPU torch: same output as eager, the report names the swapped nodes,
autograd graphs are left alone, the name is discoverable."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tracea.ops import compile_backend as cb  # noqa: E402
from tracea.ops import compile_choice as cc  # noqa: E402

FAST = cb.make_backend(inductor=False, choose="always")  # the rewritten graph as Python, every match swapped


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
    # the registered backend measures: each matmul is swapped or kept by its timing on this machine
    assert [c["kind"] for c in report["choices"]] == ["matmul"] * 3
    for c in report["choices"]:
        assert c["tracea_ms"] > 0 and c["torch_ms"] > 0 and c["tracea"] == (c["tracea_ms"] <= cc.MARGIN * c["torch_ms"])
    assert len(report["replaced"]) + len(report["kept"]) == 3
    assert report["compiler"] in ("inductor",) or report["compiler"].startswith("python (Inductor failed")
    assert "kept" in cb.format_report(report) or "tracea:" in cb.format_report(report)


def test_entry_point_is_declared() -> None:
    from importlib.metadata import PackageNotFoundError, distribution, entry_points

    try:
        distribution("tracea")
    except PackageNotFoundError:
        pytest.skip("tracea is not pip-installed here (a source tree on the path): no entry points")

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
        report = cb.rewrite(gm, [x], choose="always")  # symbolic_trace keeps no example values to measure
        tracea.ops.clear_cache()
        got, want = gm(x), model(x)
    assert sorted(_kinds(report)) == ["conv2d", "conv2d", "softmax"]
    assert not any(n.op == "call_module" for n in gm.graph.nodes)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    assert tracea.ops.stats()["tracea"] == 3, tracea.ops.stats()


# ------------------------------------------------------------------ the custom ops, and which nodes are swapped

OPCHECK = {
    "matmul": lambda: (torch.randn(2, 5, 8), torch.randn(8, 3)),
    "linear": lambda: (torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)),
    "conv2d": lambda: (torch.randn(1, 3, 9, 9).contiguous(memory_format=torch.channels_last),
                       torch.randn(4, 3, 3, 3).contiguous(memory_format=torch.channels_last), None, [1, 1], [1, 1],
                       [1, 1], 1),
    "softmax": lambda: (torch.randn(3, 7), -1),
    "attention": lambda: (torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), True, None,
                          True),
}


@pytest.mark.parametrize("kind", list(OPCHECK))
def test_custom_ops_are_registered_with_fake_implementations_that_match(kind) -> None:
    """torch.library.opcheck: the schema, the fake implementation against the real one (shape, dtype and
    strides: a channels_last conv stays channels_last), and the op under AOT dispatch."""
    op = getattr(torch.ops.tracea, kind).default
    args = OPCHECK[kind]()
    with torch.no_grad():
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
        real = op(*args)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
    assert fake.shape == real.shape and fake.stride() == real.stride() and fake.dtype == real.dtype


def _mlp_graph(dtype: torch.dtype = torch.float32) -> tuple[torch.fx.GraphModule, list]:
    model, x = MLP(32, 48).to(dtype), torch.randn(8, 32, dtype=dtype)
    gm = torch.fx.symbolic_trace(model)
    from torch.fx.passes.shape_prop import ShapeProp

    ShapeProp(gm).propagate(x)  # example values, as Dynamo leaves them in node.meta
    for node in gm.graph.nodes:
        if "tensor_meta" in node.meta and node.op != "get_attr":
            tm = node.meta["tensor_meta"]
            node.meta["example_value"] = torch.empty_strided(tm.shape, tm.stride, dtype=tm.dtype)
    return gm, [x]


def test_measure_swaps_only_where_tracea_is_faster(monkeypatch) -> None:
    """The measured choice: faster by the margin is swapped, a tie is kept, the reason names both times, and
    a signature is measured once."""
    calls = []

    def fake_median(fn, device, repeats=15, hold=True):
        calls.append(fn)
        return 1.0 if len(calls) % 2 else speed[0]  # Tracea first (1 ms), then torch's op

    monkeypatch.setattr(cc, "_median_ms", fake_median)
    monkeypatch.setattr(cc, "CHOICES", {})
    speed = [2.0]  # torch twice as slow: swap
    gm, xs = _mlp_graph()
    with torch.no_grad():
        report = cb.rewrite(gm, xs)
    assert _kinds(report) == ["matmul"] * 3 and report["kept"] == []
    assert all("Tracea 1.0000 ms, torch 2.0000 ms" == c["reason"] for c in report["choices"])
    assert len(calls) == 4  # two signatures ((8, 32)@(32, 48) twice, (8, 48)@(48, 32) once), two timings each
    monkeypatch.setattr(cc, "CHOICES", {})
    speed[0] = 1.0  # a tie: torch's op stays
    gm, xs = _mlp_graph()
    with torch.no_grad():
        report = cb.rewrite(gm, xs)
    assert report["replaced"] == [] and len(report["kept"]) == 3
    assert all(f"not under {cc.MARGIN:g}x torch's" in k for k in report["kept"])


def test_a_wrong_or_falling_back_tracea_op_is_never_swapped(monkeypatch) -> None:
    monkeypatch.setattr(cc, "CHOICES", {})
    monkeypatch.setattr(cc, "_median_ms", lambda fn, device, repeats=15, hold=True: 0.0)  # Tracea would look fastest
    monkeypatch.setitem(cc._TORCH_OPS, "matmul", lambda a, b: torch.matmul(a, b) + 1.0)  # torch's answer differs
    gm, xs = _mlp_graph()
    with torch.no_grad():
        report = cb.rewrite(gm, xs)
    assert report["replaced"] == [] and all("differs from torch's" in k for k in report["kept"])
    import tracea

    monkeypatch.setattr(cc, "CHOICES", {})
    monkeypatch.setitem(cc._TORCH_OPS, "matmul", torch.matmul)
    gm, xs = _mlp_graph(torch.float64)  # float64: the kernels do not take it, tracea.ops falls back
    with torch.no_grad():
        report = cb.rewrite(gm, xs)
    assert report["replaced"] == [] and all("falls back" in k for k in report["kept"]), report["kept"]
    tracea.ops.clear_cache()


def test_dynamic_shapes_keep_torchs_op_and_say_why() -> None:
    import tracea

    tracea.ops.register_compile_backend()
    torch._dynamo.reset()
    model = MLP(32, 48)
    fn = torch.compile(model, backend=cb.make_backend(inductor=False), dynamic=True)
    x = torch.randn(8, 32)
    with torch.no_grad():
        assert torch.allclose(fn(x), model(x), rtol=1e-4, atol=1e-4)
    report = cb.last_report()
    assert report["replaced"] == [] and report["kept"] and all("dynamic shapes" in k for k in report["kept"])


def test_mode_and_options_reach_inductor() -> None:
    assert cb._inductor_patches("reduce-overhead", None) == {"triton.cudagraphs": True}
    assert cb._inductor_patches(None, {"max_autotune": True}) == {"max_autotune": True}
    assert cb._inductor_patches(None, None) == {}
    with pytest.raises(ValueError, match="choose"):
        cb.make_backend(choose="sometimes")


def test_grouped_query_sdpa_is_swapped_and_means_what_sdpa_means() -> None:
    import tracea

    def block(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    torch.manual_seed(3)
    q, k, v = torch.randn(1, 8, 16, 32), torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 32)
    with torch.no_grad():
        got = _compiled(block)(q, k, v)
        want = block(q, k, v)
        assert _kinds(cb.last_report()) == ["attention"] and tracea.ops.explain().path == "tracea"
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
        # the custom op without gqa, kv heads other than q's: torch's op, which refuses them as SDPA does
        with pytest.raises(RuntimeError):
            torch.ops.tracea.attention.default(q, k, v, True, None, False)


def test_prebuild_builds_each_kernel_once_before_the_measurements(monkeypatch) -> None:
    import tracea

    monkeypatch.setattr(cc, "CHOICES", {})
    tracea.ops.clear_cache()
    pending = [("matmul", (torch.empty(8, 16), torch.empty(16, 12))), ("matmul", (torch.empty(8, 16), torch.empty(16, 12))),
               ("softmax", (torch.empty(5, 40), -1)), ("matmul", (torch.empty(9, 16), torch.empty(16, 12)))]
    cc.prebuild(pending)  # three signatures, built by threads at once
    assert tracea.ops.stats()["builds"] == 3
    for kind, examples in pending:
        cc.measure(kind, examples)
    assert tracea.ops.stats()["builds"] == 3  # the measurements found them built
    tracea.ops.clear_cache()


def test_measure_takes_broadcast_inputs_and_keeps_what_torch_broadcasts() -> None:
    """A stride-0 (expanded) input is measured on a view with the same strides; the ops torch broadcasts and
    the kernels do not (a bias of one element, a key batch of 1) run torch's op inside the Tracea op."""
    with torch.no_grad():
        choice = cc.measure("softmax", (torch.randn(1, 64).expand(4, 64), -1))
        assert isinstance(choice, cc.Choice) and choice.reason
        x, w, b1 = torch.randn(4, 8), torch.randn(5, 8), torch.randn(1)
        torch.testing.assert_close(torch.ops.tracea.linear.default(x, w, b1), F.linear(x, w, b1))
        q, kv = torch.randn(2, 2, 8, 16), torch.randn(1, 2, 8, 16)
        torch.testing.assert_close(torch.ops.tracea.attention.default(q, kv, kv, False, None),
                                   F.scaled_dot_product_attention(q, kv, kv))
        with pytest.raises(RuntimeError):  # mismatched inner sizes: torch's own error, as eager gives
            torch.ops.tracea.matmul.default(torch.randn(3, 4), torch.randn(5, 2))


@pytest.mark.parametrize("tracea_faster", [False, True])
def test_inductor_compiles_while_the_measured_kernels_build(monkeypatch, tracea_faster) -> None:
    """A first compile with nodes to measure: Inductor compiles the graph as it is while the kernels build
    (the report says so and times both); no node swapped returns that compile, a swapped node has Inductor
    compile the rewritten copy. Either way the output is eager's. A second compile of the same signatures
    measures nothing and so overlaps nothing."""
    import tracea

    monkeypatch.setattr(cc, "CHOICES", {})
    timings = iter([1.0, 4.0] * 8 if tracea_faster else [1.0, 1.0] * 8)
    monkeypatch.setattr(cc, "_median_ms", lambda fn, device, repeats=15, hold=True: (fn(), next(timings))[1])
    torch.manual_seed(7)
    model, x = MLP(32, 64), torch.randn(16, 32)
    with torch.no_grad():
        want = model(x)
        got = _compiled(model, "tracea")(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
    report = tracea.ops.last_report()
    assert report["overlapped"] and report["compiler"] == "inductor"
    assert len(report["replaced"]) == (3 if tracea_faster else 0) and len(report["choices"]) == 3
    secs = report["seconds"]
    assert secs["choose"] >= secs["build"] > 0 and secs["inductor"] > 0
    assert "while the kernels built" in cb.format_report(report)
    with torch.no_grad():
        again = _compiled(model, "tracea")(x)
    assert torch.allclose(again, want, rtol=1e-4, atol=1e-4) and not tracea.ops.last_report().get("overlapped")


def test_the_rewritten_copy_keeps_dynamos_metadata() -> None:
    """The copy the rewrite changes (while Inductor compiles the original) carries what Dynamo hangs on its
    GraphModule and placeholders: AOTAutograd reads them to keep parameters static inputs, without which
    Inductor's CUDA graph trees copy every parameter at every replay."""
    seen = []

    def grab(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(ConvNet(), backend=grab)(torch.randn(1, 3, 8, 8))
    gm = seen[0]
    new = cb._copy(gm)
    assert hasattr(gm, "_param_name_to_source") and new._param_name_to_source is gm._param_name_to_source
    assert new.meta.get("dynamo_compile_id") == gm.meta.get("dynamo_compile_id") is not None
    sources = [getattr(n, "_dynamo_source", None) for n in gm.graph.find_nodes(op="placeholder")]
    assert any(s is not None for s in sources)
    assert [getattr(n, "_dynamo_source", None) for n in new.graph.find_nodes(op="placeholder")] == sources
    assert new.graph is not gm.graph and len(new.graph.nodes) == len(gm.graph.nodes)


def test_a_graph_timed_for_the_choice_holds_its_kernels_only_while_it_lives(monkeypatch) -> None:
    """``_graph_ms`` captures, replays and destroys its graph inside ``graph_held.measuring()``: the kernels its
    capture held are its own, let go with it (a user's graph keeps them; tests/ops/test_ops_launch_on.py). The CUDA
    calls are stand-ins: each call of the op runs inside the measurement, and the graph is gone before it ends."""
    from contextlib import contextmanager

    from tracea.emitters import graph_held

    log: list[str] = []

    @contextmanager
    def measuring():
        log.append("open")
        yield
        log.append("closed")

    class Graph:
        def replay(self):
            log.append("replay")

        def __del__(self):
            log.append("graph destroyed")

    @contextmanager
    def capture(g, capture_error_mode):
        log.append("capture")
        yield

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    monkeypatch.setattr(graph_held, "measuring", measuring)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    ms = cc._graph_ms(lambda: log.append("op"), torch.device("cpu"), repeats=2, calls=3)
    assert ms == 1.0 / 3
    assert log[:3] == ["op"] * 3 and log[3:6] == ["open", "capture", "op"]
    assert log.index("closed") == len(log) - 1 and log.index("graph destroyed") == len(log) - 2
