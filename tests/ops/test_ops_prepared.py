"""The fast path of tracea.ops (runs in CI, NumPy arrays; torch CPU tensors where torch is installed): a
repeated call of one signature runs every check and the routing once, then only its prepared launch
(counts, not timings: benchmarks/bench_ops_host.py times it); every change of signature takes the slow path
once and is prepared again, never launched with stale arguments; and every check the slow path makes on a
call is made on the same call when an equal-looking one was prepared before it (one case per check)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tracea
from tracea.doctor.errors import BadInputError
from tracea.kernels import Attention, Conv2d, Gemm, Softmax, relative_error, tolerance

ops = tracea.ops
pytestmark = pytest.mark.usefixtures("kernel_cache")
RNG = np.random.default_rng(31)


@pytest.fixture(autouse=True)
def _fresh():
    ops.clear_cache()
    ops.allow_fallback(True)
    yield
    ops.clear_cache()


def _close(op, inputs, got):
    assert got.shape == tuple(op.output_shape()) and got.dtype == op.dtype.storage
    err = relative_error(np.asarray(got, dtype=np.float64), op.reference(inputs))
    assert err <= tolerance(op), (op.signature, err)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# each op: (its IR value, a function making fresh inputs, the call on them)
CASES = {
    "gemm": (Gemm(m=33, n=20, k=17, epilogue=("bias", "relu")),
             lambda: {"a": _f32(33, 17), "b": _f32(17, 20), "bias": _f32(20)},
             lambda i: ops.gemm(i["a"], i["b"], bias=i["bias"], epilogue="bias,relu")),
    "conv2d": (Conv2d(n=2, c=3, h=9, w=7, k=5, r=3, s=3, padding=(1, 1), layout="nchw"),
               lambda: {"x": _f32(2, 3, 9, 7), "weight": _f32(5, 3, 3, 3)},
               lambda i: ops.conv2d(i["x"], i["weight"], padding=1)),
    "softmax": (Softmax(rows=12, cols=40), lambda: {"x": _f32(3, 4, 40)},
                lambda i: ops.softmax(i["x"])),
    "attention": (Attention(batch=1, heads=2, seq_q=24, head_dim=16, seq_k=24, causal=True),
                  lambda: {"q": _f32(1, 2, 24, 16), "k": _f32(1, 2, 24, 16), "v": _f32(1, 2, 24, 16)},
                  lambda i: ops.attention(i["q"], i["k"], i["v"], causal=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_repeated_signature_is_checked_and_routed_once(name):
    """1000 calls of one signature on fresh arrays: one slow call (checks, route, build), 999 prepared ones;
    every result right (the kernel reads each call's own arrays, not the first call's)."""
    op, make, call = CASES[name]
    for i in range(1000):
        inputs = make()
        got = call(inputs)
        if i % 97 == 0 or i == 999:
            if name == "softmax":
                _close(op, {"x": inputs["x"].reshape(12, 40)}, got.reshape(12, 40))
            else:
                _close(op, inputs, got)
    s = ops.stats()
    assert s["slow_path"] == 1 and s["builds"] == 1 and s["fast_path"] == 999 and s["tracea"] == 1000, s
    assert s.get("fallbacks", 0) == 0
    route = ops.explain()  # a prepared call still says what ran
    assert route.path == "tracea" and route.in_process and route.op == name


def test_every_change_of_signature_takes_the_slow_path_once():
    a, b = _f32(16, 24), _f32(24, 8)
    ops.gemm(a, b)
    ops.gemm(a, b)
    slow = ops.stats()["slow_path"]
    a17 = _f32(17, 24)
    changes = [
        lambda: ops.gemm(a17, b),                                             # shape
        lambda: ops.gemm(a.astype(np.float16), b.astype(np.float16)),         # dtype
        lambda: ops.gemm(a, np.asfortranarray(b)),                            # strides: column-major b
        lambda: ops.gemm(a, b, alpha=0.5),                                    # an option
        lambda: ops.gemm(a, b, alpha=0.5, epilogue="scale,relu"),             # another option
        lambda: ops.gemm(a, b, out=np.empty((16, 8), np.float32)),            # an out given
    ]
    for n, change in enumerate(changes, 1):
        got = change()
        assert ops.stats()["slow_path"] == slow + n, n
        got2 = change()  # the same again: prepared now
        assert ops.stats()["slow_path"] == slow + n, n
        np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(got2, np.float64))
    want = a.astype(np.float64) @ b.astype(np.float64)
    for got in (ops.gemm(a, np.asfortranarray(b)), ops.gemm(a, b)):  # each prepared entry its own layout
        assert relative_error(got.astype(np.float64), want) < 1e-5


def test_a_strided_view_of_a_prepared_shape_is_not_read_as_dense():
    """The same shape and dtype through a strided view: another key (its strides), the slow path's answer."""
    x = _f32(6, 30)
    ops.softmax(x)
    ops.softmax(x)
    wide = _f32(6, 60)
    view = wide[:, ::2]  # (6, 30), not contiguous: the kernels do not take it
    got = ops.softmax(view)
    assert ops.explain().path == "fallback"
    ref = np.exp(view - view.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, ref / ref.sum(axis=1, keepdims=True), rtol=1e-5)


# Every check a key must carry: (a valid call, prepared first; the same call made wrong in one way, which
# hashes like it or shares its shapes; what the error says). Each wrong call must be refused as it is cold.
_A, _B = _f32(8, 12), _f32(12, 4)
_X = _f32(1, 2, 6, 6)
_W = _f32(3, 2, 3, 3)
_Q = _f32(1, 1, 8, 8)
_READONLY = np.empty((8, 4), np.float32)
_READONLY.setflags(write=False)
CHECKS = {
    "alpha True is not 1": (lambda: ops.gemm(_A, _B, alpha=1), lambda: ops.gemm(_A, _B, alpha=True), "alpha"),
    "alpha nan": (lambda: ops.gemm(_A, _B, alpha=0.5), lambda: ops.gemm(_A, _B, alpha=float("nan")), "alpha"),
    "epilogue unknown": (lambda: ops.gemm(_A, _B, epilogue="relu"), lambda: ops.gemm(_A, _B, epilogue="relux"),
                         "epilogue"),
    "stride True is not 1": (lambda: ops.conv2d(_X, _W, stride=1),
                             lambda: ops.conv2d(_X, _W, stride=True), "stride"),
    "stride 1.0 is not 1": (lambda: ops.conv2d(_X, _W, stride=(1, 1)),
                            lambda: ops.conv2d(_X, _W, stride=(1.0, 1)), "stride"),
    "groups True is not 1": (lambda: ops.conv2d(_X, _W, groups=1), lambda: ops.conv2d(_X, _W, groups=True),
                             "groups"),
    "layout": (lambda: ops.conv2d(_X, _W, layout="nchw"), lambda: ops.conv2d(_X, _W, layout="nchw "), "layout"),
    "dim True is not 1": (lambda: ops.softmax(_A, dim=1), lambda: ops.softmax(_A, dim=True), "dim"),
    "causal 1 is not True": (lambda: ops.attention(_Q, _Q, _Q, causal=True),
                             lambda: ops.attention(_Q, _Q, _Q, causal=1), "causal"),
    "scale negative": (lambda: ops.attention(_Q, _Q, _Q, scale=0.5),
                       lambda: ops.attention(_Q, _Q, _Q, scale=-0.5), "scale"),
    "out read-only": (lambda: ops.gemm(_A, _B, out=np.empty((8, 4), np.float32)),
                      lambda: ops.gemm(_A, _B, out=_READONLY), "out"),
    "out wrong dtype": (lambda: ops.gemm(_A, _B, out=np.empty((8, 4), np.float32)),
                        lambda: ops.gemm(_A, _B, out=np.empty((8, 4), np.float64)), "out"),
    "out is an input": (lambda: ops.softmax(_A, out=np.empty((8, 12), np.float32)),
                        lambda: ops.softmax(_A, out=_A), "overlaps"),
    "out overlaps an input": (lambda: ops.gemm(_f32(8, 8), _f32(8, 8), out=np.empty((8, 8), np.float32)),
                              lambda: (lambda buf: ops.gemm(buf[:8], _f32(8, 8), out=buf[4:]))(_f32(12, 8)),
                              "overlaps"),
    "a float64 array": (lambda: ops.softmax(_A), lambda: ops.softmax(_A.astype(np.int32)), "int32"),
    "a list": (lambda: ops.softmax(_A), lambda: ops.softmax(_A.tolist()), "NumPy array"),
    "inner sizes": (lambda: ops.gemm(_A, _B), lambda: ops.gemm(_A, _f32(11, 4)), "inner"),
}


@pytest.mark.parametrize("case", list(CHECKS))
def test_the_fast_path_skips_no_check_of_the_slow_path(case):
    valid, wrong, says = CHECKS[case]
    with pytest.raises(BadInputError, match=says) as cold:
        wrong()
    valid()
    valid()
    assert ops.stats()["fast_path"] >= 1  # the valid signature is prepared ...
    with pytest.raises(BadInputError, match=says) as warm:
        wrong()  # ... and the wrong call is still refused, with the same words
    assert str(warm.value) == str(cold.value)


def test_the_fast_path_refuses_an_out_that_overlaps_an_input():
    """The overlap depends on the call's memory, so the prepared call checks it itself."""
    buf = _f32(16, 8)
    b = _f32(8, 8)
    ops.gemm(buf[:8], b, out=buf[8:])  # apart: fine, and prepared
    ops.gemm(buf[:8], b, out=buf[8:])
    fast = ops.stats()["fast_path"]
    assert fast >= 1
    with pytest.raises(BadInputError, match="overlaps the input 'a'"):
        ops.gemm(buf[8:], b, out=buf[8:])  # the same signature, now over its own input
    with pytest.raises(BadInputError, match="overlaps the input 'b'"):
        ops.gemm(buf[:8], buf[8:], out=buf[8:])
    assert ops.stats()["fast_path"] == fast


def test_threads_share_prepared_calls():
    op = Gemm(m=40, n=24, k=32)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(50):
            inputs = op.random_inputs(rng)
            got = ops.gemm(inputs["a"], inputs["b"])
            err = relative_error(got.astype(np.float64), op.reference(inputs))
            if err > tolerance(op):
                errors.append(err)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and ops.stats()["tracea"] == 200 and ops.stats()["fast_path"] >= 190


def test_explain_never_runs_a_prepared_call():
    a, b = _f32(8, 12), _f32(12, 4)
    ops.gemm(a, b)
    ops.gemm(a, b)
    before = ops.stats()
    route = ops.explain(ops.gemm, a, b)
    assert route.path == "tracea" and ops.stats() == before


def test_the_prepared_table_is_bounded(monkeypatch):
    from tracea.ops import _prepared

    monkeypatch.setattr(_prepared, "LIMIT", 3)
    for n in range(2, 8):
        ops.softmax(_f32(2, n))
    assert len(_prepared.PREPARED) == 3
    ops.softmax(_f32(2, 7))  # the newest is kept
    assert ops.stats()["fast_path"] == 1


def test_torch_cpu_tensors_take_the_fast_path_and_autograd_leaves_it():
    torch = pytest.importorskip("torch")
    a = torch.randn(20, 12)
    w = torch.randn(12, 6, requires_grad=True)
    with torch.no_grad():
        for _ in range(3):
            got = ops.gemm(a, w)
    assert ops.stats()["fast_path"] == 2 and ops.explain().path == "tracea"
    torch.testing.assert_close(got, a @ w.detach(), rtol=1e-4, atol=1e-4)
    y = ops.gemm(a, w)  # grad mode on and w requires grad: another key, the vendor call with autograd
    assert ops.explain().path == "fallback" and "autograd" in ops.explain().reason and y.requires_grad
    with torch.no_grad():
        ops.gemm(a, w.t().contiguous().t())  # the same shape, column-major: its own key, the right answer
        torch.testing.assert_close(ops.gemm(a, w.t().contiguous().t()), a @ w.detach(), rtol=1e-4, atol=1e-4)
        x = torch.randn(4, 10)
        ops.softmax(x, out=torch.empty(4, 10))
        ops.softmax(x, out=torch.empty(4, 10))
        with pytest.raises(BadInputError, match="overlaps"):
            ops.softmax(x, out=x)  # prepared for a tensor out; this one is the input


def test_an_out_in_the_gaps_of_a_strided_input_is_legal():
    """Only shared elements are an overlap: an out between a strided input's rows takes the call (the vendor
    route here, the input being strided) and gets the right answer."""
    buf = np.zeros((4, 128), np.float32)
    a = buf[:, :64]
    a[...] = _f32(4, 64)
    b = _f32(64, 16)
    out = buf[0, 64:128].reshape(4, 16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = ops.gemm(a, b, out=out)
    assert got is out and relative_error(out.astype(np.float64), want) < 1e-5


def test_torch_negative_bit_views_are_never_read_as_their_memory():
    torch = pytest.importorskip("torch")
    a, b = torch.randn(24, 16), torch.randn(16, 8)
    with torch.no_grad():
        ops.gemm(a, b)
        ops.gemm(a, b)  # prepared
        neg = torch._neg_view(a)  # the same memory and strides, the value -a
        got = ops.gemm(neg, b)
        assert ops.explain().path == "fallback" and "negative" in ops.explain().reason
        torch.testing.assert_close(got, (-a) @ b, rtol=1e-4, atol=1e-4)
        t = torch.zeros(4, 128)
        tb = t[:, :64]
        tb.copy_(torch.randn(4, 64))
        w = torch.randn(64, 16)
        out = t[0, 64:128].view(4, 16)  # in the gaps of the strided input: legal
        torch.testing.assert_close(ops.gemm(tb, w, out=out), tb @ w, rtol=1e-4, atol=1e-4)


def test_a_prepared_route_is_each_callers_own_copy():
    x = _f32(3, 20)
    ops.softmax(x)
    ops.softmax(x)
    r1 = ops.explain()
    r1.notes.append("mine")
    r1.variant = "changed"
    r2 = ops.explain()
    assert "mine" not in r2.notes and r2.variant != "changed"


@pytest.mark.parametrize("case", ["softmax", "softmax_3d", "gemm", "conv_channels_last"])
def test_a_prepared_result_is_laid_out_as_the_slow_paths(case):
    """The prepared call makes its result by ``empty_like`` of an input only where the slow path's result has
    that input's shape, strides and dtype, and the input is dense: every later call's result is laid out as
    the first one's (a gemm's new shape; a channels_last conv whose result has its input's shape and strides,
    but not contiguous ones) and holds the same values."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(3)
    if case == "softmax":
        args, fn = (torch.randn(6, 40),), lambda x: ops.softmax(x)
    elif case == "softmax_3d":
        args, fn = (torch.randn(2, 3, 40),), lambda x: ops.softmax(x)
    elif case == "gemm":
        args, fn = (torch.randn(8, 8), torch.randn(8, 5)), lambda a, b: ops.gemm(a, b)
    else:
        x = torch.randn(1, 8, 6, 6).contiguous(memory_format=torch.channels_last)
        w = torch.randn(8, 8, 3, 3).contiguous(memory_format=torch.channels_last)
        args, fn = (x, w), lambda x, w: ops.conv2d(x, w, padding=1)
    with torch.no_grad():
        first = fn(*args)
        before = ops.stats().get("fast_path", 0)
        for _ in range(3):
            again = fn(*args)
            assert (again.shape, again.stride(), again.dtype) == (first.shape, first.stride(), first.dtype)
            torch.testing.assert_close(again, first)
        assert ops.stats().get("fast_path", 0) == before + 3, "the repeated calls did not take the prepared path"
