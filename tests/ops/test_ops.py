"""tracea.ops on NumPy arrays (runs in CI): every op against the float64 references of kernels/ on odd
shapes, each fallback rule and what explain says of it, the in-process kernel cache, the tuned schedule
from the tuning database, and a fresh process that finds the binary in the build cache."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tracea
from tracea.doctor.errors import BadInputError, TraceaError, UnsupportedError
from tracea.kernels import Attention, Conv2d, Gemm, Softmax, relative_error, tolerance

ops = tracea.ops
pytestmark = pytest.mark.usefixtures("kernel_cache")


@pytest.fixture(autouse=True, scope="module")
def _fresh_ops_cache():
    """Kernels and choices of other modules (another TRACEA_HOME) are not this module's."""
    ops.clear_cache()
    yield
    ops.clear_cache()


@pytest.fixture(autouse=True)
def _fallback_on():
    ops.allow_fallback(True)
    yield
    ops.allow_fallback(True)


def _check(op, inputs, got):
    assert got.shape == tuple(op.output_shape()) and got.dtype == op.dtype.storage
    err = relative_error(got.astype(np.float64), op.reference(inputs))
    assert err <= tolerance(op), (op.signature, err)


def _ran_tracea():
    route = ops.explain()
    assert route.path == "tracea", str(route)
    return route


def test_gemm_fp32_odd_shape_and_cache():
    op = Gemm(m=37, n=23, k=19)
    inputs = op.random_inputs(np.random.default_rng(1))
    _check(op, inputs, ops.gemm(inputs["a"], inputs["b"]))
    route = _ran_tracea()
    assert route.variant and route.schedule_source == "heuristic" and route.in_process is False
    builds = ops.stats()["builds"]
    inputs = op.random_inputs(np.random.default_rng(2))  # fresh inputs, same op: the cached kernel
    _check(op, inputs, ops.gemm(inputs["a"], inputs["b"]))
    assert ops.stats()["builds"] == builds
    assert ops.explain().in_process is True and "built earlier in this process" in str(ops.explain())
    assert ops.explain(ops.gemm, inputs["a"], inputs["b"]).in_process is True


def test_gemm_epilogue_column_major_operand_and_out():
    op = Gemm(m=29, n=17, k=41, layout_a="col", epilogue=("bias", "gelu"))
    inputs = op.random_inputs(np.random.default_rng(3))
    a = inputs["a"].T  # (m, k) seen over a (k, m) buffer: read in place as layout "col"
    assert not a.flags.c_contiguous
    out = np.full((29, 17), np.nan, dtype=np.float32)
    got = ops.gemm(a, inputs["b"], bias=inputs["bias"], epilogue="bias,gelu", out=out)
    assert got is out
    _check(op, inputs, got)
    _ran_tracea()


def test_gemm_fp16():
    op = Gemm(m=33, n=18, k=27, dtype="fp16")
    inputs = op.random_inputs(np.random.default_rng(4))
    got = ops.gemm(inputs["a"], inputs["b"])
    route = ops.explain()
    if route.path == "fallback":  # a host without F16C: the planner does not serve fp16, and says so
        assert "fp16" in route.reason
    _check(op, inputs, got)


def test_conv2d_nchw_stride_padding_dilation_groups_bias():
    op = Conv2d(n=2, c=6, h=11, w=9, k=4, r=3, s=2, stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2,
                bias=True)
    inputs = op.random_inputs(np.random.default_rng(5))
    got = ops.conv2d(inputs["x"], inputs["weight"], inputs["bias"], stride=(2, 1), padding=(1, 2),
                     dilation=(2, 1), groups=2)
    _check(op, inputs, got)
    _ran_tracea()


def test_conv2d_nhwc():
    op = Conv2d(n=1, c=5, h=7, w=10, k=3, r=3, s=3, padding=1, layout="nhwc")
    inputs = op.random_inputs(np.random.default_rng(6))
    _check(op, inputs, ops.conv2d(inputs["x"], inputs["weight"], padding=1, layout="nhwc"))
    _ran_tracea()


def test_softmax_leading_dims():
    x = (np.random.default_rng(7).standard_normal((3, 5, 37)) * 4 + 40).astype(np.float32)
    got = ops.softmax(x)
    _ran_tracea()
    op = Softmax(rows=15, cols=37)
    _check(op, {"x": x.reshape(15, 37)}, got.reshape(15, 37))
    assert got.shape == x.shape


def test_attention_gqa_causal_unaligned():
    op = Attention(batch=2, heads=4, kv_heads=2, seq_q=13, seq_k=21, head_dim=64, causal=True)
    inputs = op.random_inputs(np.random.default_rng(8))
    _check(op, inputs, ops.attention(inputs["q"], inputs["k"], inputs["v"], causal=True))
    _ran_tracea()


def test_attention_window():
    op = Attention(batch=1, heads=2, seq_q=19, head_dim=64, window=(5, 2))
    inputs = op.random_inputs(np.random.default_rng(9))
    _check(op, inputs, ops.attention(inputs["q"], inputs["k"], inputs["v"], window=(5, 2)))
    _ran_tracea()


# ---- fallbacks: each rule, its result against the reference, and what explain says ---------------------

def _fallback(reason_part):
    route = ops.explain()
    assert route.path == "fallback" and reason_part in route.reason and reason_part in str(route), str(route)
    assert route.vendor and route.vendor in str(route)


def test_fallback_dtype_not_served():
    op = Gemm(m=9, n=7, k=5)
    inputs = op.random_inputs(np.random.default_rng(10))
    a, b = inputs["a"].astype(np.float64), inputs["b"].astype(np.float64)
    got = ops.gemm(a, b)
    _fallback("dtype float64")
    assert got.dtype == np.float64 and np.allclose(got, a @ b, rtol=1e-12, atol=1e-12)


def test_fallback_strided_view():
    x = np.random.default_rng(11).standard_normal((6, 40)).astype(np.float32)[:, ::2]
    got = ops.softmax(x)
    _fallback("not contiguous")
    _check(Softmax(rows=6, cols=20), {"x": np.ascontiguousarray(x)}, got)


def test_fallback_softmax_not_last_dim():
    x = np.random.default_rng(12).standard_normal((7, 5)).astype(np.float32)
    got = ops.softmax(x, dim=0)
    _fallback("not the last")
    _check(Softmax(rows=5, cols=7), {"x": np.ascontiguousarray(x.T)}, np.ascontiguousarray(got.T))


def test_fallback_batched_gemm():
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    got = ops.gemm(a, b)
    _fallback("2-D")
    assert np.allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_fallback_shape_the_ir_refuses():
    rng = np.random.default_rng(14)
    q, k, v = (rng.standard_normal((1, 2, 5, 12)).astype(np.float32) for _ in range(3))  # head_dim 12: not x8
    got = ops.attention(q, k, v)
    _fallback("head_dim")
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(12)
    p = np.exp(s - s.max(-1, keepdims=True))
    assert np.allclose(got, (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_fallback_can_be_refused():
    ops.allow_fallback(False)
    x = np.zeros((3, 4), dtype=np.float64)
    with pytest.raises(UnsupportedError, match="float64") as exc:
        ops.softmax(x)
    assert isinstance(exc.value, TraceaError) and exc.value.hint
    assert ops.explain(ops.softmax, x).path == "fallback"  # explain still answers, running nothing


def test_explain_runs_nothing():
    x = np.random.default_rng(15).standard_normal((4, 9)).astype(np.float32)
    before = ops.stats()
    route = ops.explain("softmax", x, dim=0)
    assert route.path == "fallback" and ops.stats() == before


def test_bad_input_is_an_error_not_a_fallback():
    a, b = np.zeros((3, 4), np.float32), np.zeros((5, 6), np.float32)
    with pytest.raises(BadInputError, match="inner sizes"):
        ops.gemm(a, b)
    with pytest.raises(BadInputError, match="NumPy array or a torch tensor"):
        ops.softmax([[1.0, 2.0]])
    with pytest.raises(BadInputError, match="out"):
        ops.gemm(np.zeros((3, 4), np.float32), np.zeros((4, 2), np.float32), out=np.zeros((3, 3), np.float32))
    with pytest.raises(BadInputError, match="channels"):
        ops.conv2d(np.zeros((1, 3, 5, 5), np.float32), np.zeros((2, 4, 3, 3), np.float32))


def test_tuned_schedule_from_the_database():
    from tracea.emitters.registry import fingerprint
    from tracea.tuner.db import TuningDB, tuning_key
    from tracea.tuner.trial import Measurement, Trial

    op = Gemm(m=45, n=31, k=22)
    inputs = op.random_inputs(np.random.default_rng(16))
    route = ops.explain(ops.gemm, inputs["a"], inputs["b"])
    assert route.schedule_source == "heuristic"
    stored = {**route.schedule, "mc": 64, "kc": 128, "threads": 1}
    host = ops._engine.host()
    key = tuning_key(op.signature, route.variant, fingerprint(host, route.backend))
    db = TuningDB()
    run = db.start_run(key=key, op=op, variant=route.variant, backend=route.backend, fingerprint="f",
                       environment={}, strategy="random", seed=0, budget=1, space_size=1, options={})
    db.add_trial(run, key, Trial(0, stored, "tuned", Measurement("ok", p50_ms=1.0, p95_ms=1.0), 0.1))
    db.close()
    ops.clear_cache()  # the choice is read once per process
    _check(op, inputs, ops.gemm(inputs["a"], inputs["b"]))
    route = _ran_tracea()
    assert route.schedule_source == "tuned" and route.schedule == stored


FRESH = """
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import tracea.ops as ops
from tracea.kernels import Gemm
op = Gemm(m=37, n=23, k=19)
inputs = op.random_inputs(np.random.default_rng(0))
y = ops.gemm(inputs["a"], inputs["b"])
seconds = time.perf_counter() - t0
r = ops.explain()
print(json.dumps({"path": r.path, "hit": r.build_cache_hit, "builds": ops.stats().get("builds", 0),
                  "seconds": seconds}))
"""


def _fresh_process(home):
    env = {**os.environ, "TRACEA_HOME": str(home)}
    out = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_does_not_compile(tmp_path):
    first = _fresh_process(tmp_path)
    assert first["path"] == "tracea" and first["hit"] is False  # compiled into this home's build cache
    second = _fresh_process(tmp_path)
    assert second["path"] == "tracea" and second["hit"] is True and second["builds"] == 1  # loaded, not compiled


def test_route_is_json_friendly():
    x = np.ones((2, 3), np.float32)
    ops.softmax(x)
    d = dataclasses.asdict(ops.explain())
    assert json.loads(json.dumps(d))["op"] == "softmax"


def test_attention_fallback_masks_match_the_ir():
    # float64 inputs take the vendor path; its mask (causal bottom-right, window, block mask, rows that keep
    # nothing: seq_q > seq_k with causal) must be the IR's, and its result the float64 reference
    bm = np.array([[True, False, True], [False, True, True], [True, True, False]])
    op = Attention(batch=1, heads=4, kv_heads=2, seq_q=40, seq_k=33, head_dim=64, causal=True, window=(9, 3),
                   block_mask=bm, block_size=(16, 16))
    inputs = op.random_inputs(np.random.default_rng(17))
    got = ops.attention(*(inputs[n].astype(np.float64) for n in "qkv"), causal=True, window=(9, 3), block_mask=bm,
                        block_size=(16, 16))
    _fallback("float64")
    ref = op.reference(inputs)
    assert not ref.any(axis=-1).all()  # some rows keep no key: they are 0
    assert np.allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_conv2d_same_padding_even_and_uneven():
    rng = np.random.default_rng(19)
    x = rng.standard_normal((1, 3, 8, 7), dtype=np.float32)
    w3 = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    got = ops.conv2d(x, w3, padding="same")  # 3x3: one on each side, the kernel runs
    _ran_tracea()
    _check(Conv2d(n=1, c=3, h=8, w=7, k=4, r=3, s=3, padding=1), {"x": x, "weight": w3}, got)
    w2 = rng.standard_normal((4, 3, 2, 2), dtype=np.float32)
    got = ops.conv2d(x, w2, padding="same")  # 2x2: the extra row and column go bottom and right, as in torch
    _fallback("unevenly")
    padded = np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1)))
    _check(Conv2d(n=1, c=3, h=9, w=8, k=4, r=2, s=2), {"x": padded, "weight": w2}, got)
    with pytest.raises(BadInputError, match="strided"):
        ops.conv2d(x, w3, stride=2, padding="same")


def test_a_variant_whose_build_refuses_gives_way(monkeypatch):
    from tracea.emitters import registry

    x = np.random.default_rng(20).standard_normal((6, 30)).astype(np.float32)
    ops.clear_cache()
    first = ops.explain(ops.softmax, x).variant
    cpu = registry.backend("cpu")
    real = cpu.build

    def refusing(op, variant, schedule, host):
        if getattr(variant, "id", variant) == first:
            raise UnsupportedError("refused by the test")
        return real(op, variant, schedule, host)

    monkeypatch.setattr(cpu, "build", refusing)
    ops.clear_cache()
    got = ops.softmax(x)
    route = ops.explain()
    assert route.path == "tracea" and route.variant != first
    assert f"passed over {first}" in str(route) and "refused by the test" in str(route)
    _check(Softmax(rows=6, cols=30), {"x": x}, got)
    tries = []

    def none_builds(*args):
        tries.append(args[1])
        raise UnsupportedError("none builds")

    monkeypatch.setattr(cpu, "build", none_builds)
    ops.clear_cache()
    got = ops.softmax(x)  # no variant builds: the vendor call, every refusal named
    assert ops.explain().path == "fallback" and "none builds" in ops.explain().reason and len(tries) >= 2
    n = len(tries)
    ops.softmax(x)  # the failure is remembered: no second round of builds
    assert len(tries) == n and ops.stats()["fallbacks"] == 2
    _check(Softmax(rows=6, cols=30), {"x": x}, got)
    ops.clear_cache()


def test_the_layout_cost_is_the_backends_answer():
    """tracea.ops.conv2d's NCHW note comes from the backend (``layout_cost``), not from a variant's name in the
    ops layer: the Hopper conv transposes an NCHW conv inside every call; NHWC, other kernels and other
    backends cost nothing."""
    from tracea.emitters import registry
    from tracea.kernels import Conv2d

    nchw = Conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, layout="nchw", dtype="fp16")
    nhwc = Conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, layout="nhwc", dtype="fp16")
    cuda = registry.backend("cuda")
    assert "transposed before each call" in cuda.layout_cost(nchw, "cuda-wgmma.conv2d")
    assert cuda.layout_cost(nhwc, "cuda-wgmma.conv2d") is None
    assert cuda.layout_cost(nchw, "cuda-mma-sync.conv2d") is None
    assert registry.backend("cpu").layout_cost(nchw, "cpu-portable.conv2d") is None
