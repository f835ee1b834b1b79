"""torch.compile(backend="tracea") on CUDA (an H100; skipped without a GPU or torch): the Llama-style MLP
block in bf16 against its float64 reference, beside eager PyTorch, with Inductor and under CUDA graphs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tracea  # noqa: E402
from tracea.ops import compile_backend as cb  # noqa: E402
from tracea.ops import compile_choice as cc  # noqa: E402

tracea.ops.register_compile_backend()  # also found through the entry point when tracea is pip-installed
ALWAYS = cb.make_backend(choose="always")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU")]


def mlp(x, wg, wu, wd):
    return (F.silu(x @ wg) * (x @ wu)) @ wd


def _inputs(m: int, d: int, h: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    shapes = ((m, d), (d, h), (d, h), (h, d))
    return [torch.randn(s, generator=g, dtype=torch.float64) / (s[0] ** 0.5 if i else 1)
            for i, s in enumerate(shapes)]


def _rel(got, want) -> float:
    return ((got.double().cpu() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("cudagraphs", [False, True])  # True: Inductor's CUDA graph trees (reduce-overhead)
@pytest.mark.parametrize("m,d,h", [(512, 1024, 2816), (200, 264, 712)])
def test_mlp_bf16_matches_reference(cudagraphs, m, d, h):
    ref_inputs = _inputs(m, d, h, seed=m + d)
    want = mlp(*ref_inputs)
    args = [t.to("cuda", torch.bfloat16) for t in ref_inputs]
    torch._dynamo.reset()
    tracea.ops.clear_cache()
    fn = torch.compile(mlp, backend=ALWAYS)  # every matmul swapped: the mechanics under test
    with torch.inference_mode(), torch._inductor.config.patch({"triton.cudagraphs": cudagraphs}):
        eager = mlp(*args)
        for _ in range(3):  # CUDA graph trees record after warm-up runs
            got = fn(*args)
        torch.cuda.synchronize()
    report = cb.last_report()
    assert [r.rsplit("::", 1)[1] for r in report["replaced"]] == ["matmul"] * 3
    assert tracea.ops.stats()["tracea"] >= 3, tracea.ops.explain()
    tol = 2e-2
    assert _rel(eager, want) < tol
    assert _rel(got, want) < tol, (_rel(got, want), report)


def test_mlp_bf16_under_cuda_graphs():
    """The compiled MLP captured in a CUDA graph by hand and replayed on fresh inputs."""
    m, d, h = 256, 512, 1408
    torch._dynamo.reset()
    fn = torch.compile(mlp, backend="tracea")
    static = [t.to("cuda", torch.bfloat16) for t in _inputs(m, d, h, seed=7)]
    with torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(*static)  # compiles and builds the kernels outside the capture
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(*static)
        fresh = _inputs(m, d, h, seed=8)
        for t, new in zip(static, fresh, strict=True):
            t.copy_(new.to("cuda", torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
    assert _rel(out, mlp(*fresh)) < 2e-2


def test_the_registered_backend_swaps_a_node_only_where_it_measured_tracea_faster():
    """backend="tracea" measures each matmul's shape on this GPU: a swapped node was faster by the margin, a
    kept one was not, both times are in the report, and the output is right either way."""
    m, d, h = 1024, 2048, 5632
    ref_inputs = _inputs(m, d, h, seed=11)
    want = mlp(*ref_inputs)
    args = [t.to("cuda", torch.bfloat16) for t in ref_inputs]
    torch._dynamo.reset()
    tracea.ops.clear_cache()
    with torch.inference_mode():
        got = torch.compile(mlp, backend="tracea")(*args)
        torch.cuda.synchronize()
    report = cb.last_report()
    assert len(report["choices"]) == 3 and len(report["replaced"]) + len(report["kept"]) == 3
    for c in report["choices"]:
        assert c["tracea_ms"] > 0 and c["torch_ms"] > 0
        faster_alone = c["tracea_ms"] <= cc.MARGIN * c["torch_ms"]
        # swapped: faster alone and with its host time; kept: slower alone, or slower once host time counts
        assert (c["tracea"] and faster_alone) or (not c["tracea"] and (not faster_alone or "host time" in c["reason"])), c
    assert _rel(got, want) < 2e-2


def test_under_graph_trees_a_node_is_timed_inside_a_cuda_graph(monkeypatch):
    """With mode="reduce-overhead" each side of a node is timed as a call inside a CUDA graph of
    GRAPH_CALLS calls (what a graph-trees replay runs), both sides right first; outside graph trees it is
    timed alone. The reason says which; the choice follows the margin."""
    monkeypatch.setattr(cc, "CHOICES", {})
    a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        graphed = cc.measure("matmul", (a, b), graphed=True)
        alone = cc.measure("matmul", (a, b), graphed=False)
    assert f"a call in a CUDA graph of {cc.GRAPH_CALLS}" in graphed.reason
    assert "CUDA graph" not in alone.reason.split(";")[0]
    assert graphed.tracea_ms > 0 and graphed.torch_ms > 0 and alone.tracea_ms > 0 and alone.torch_ms > 0
    assert graphed.tracea == (graphed.tracea_ms <= cc.MARGIN * graphed.torch_ms)
    assert not alone.tracea or alone.tracea_ms <= cc.MARGIN * alone.torch_ms  # and the call with its host time
