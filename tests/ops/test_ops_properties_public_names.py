"""Properties of the public names of ``tracea.ops`` beyond the four ops: ``explain`` takes only the ops (40
calls), ``allow_fallback`` only a bool (20), ``stats()`` counts calls by path and ``clear_cache()`` forgets
them; without torch the PyTorch pieces are one clear error, and with it they take hostile arguments (20
calls). A public name that no property covers fails here.
"""

from __future__ import annotations

import importlib.util
import inspect
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from ops_calls import HUGE, OPS, SCALARS, props  # noqa: E402
from ops_check import FUNCS, one_line  # noqa: E402

from tracea import ops  # noqa: E402
from tracea.doctor.errors import BadInputError, UnsupportedError  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None


EXPLAIN_FNS: list[Any] = [*SCALARS, print, len, ops.explain, ops.clear_cache, ops.stats, ops.allow_fallback,
                          ops.Route, lambda *a, **k: 1, "GEMM", "gemm ", "conv", "Gemm", np.matmul,
                          np.ones((2, 2), np.float32)]


def test_explain_takes_only_the_ops() -> None:
    """explain's op argument: a name or function of the four ops (or a Tracea conv layer), else one
    BadInputError, and nothing else is ever called (no cache cleared, no policy changed); an op with
    arguments it does not take is a BadInputError too."""
    a = np.ones((3, 4), np.float32)

    @props(40)
    @given(fn=st.sampled_from(EXPLAIN_FNS + [None, *OPS, *FUNCS.values()]),
           args=st.lists(st.sampled_from([a, *SCALARS]), max_size=3),
           kwargs=st.dictionaries(st.sampled_from(["out", "bogus", "dim", "alpha"]), st.sampled_from(SCALARS),
                                  max_size=2))
    def prop(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
        ops.gemm(a, a.T)  # a call to remember, counted
        counts = ops.stats()
        try:
            route = ops.explain(fn, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - checked on the next line
            one_line(exc)
            assert isinstance(exc, BadInputError), exc
        else:
            assert isinstance(route, ops.Route) and str(route)
            assert fn is None or (isinstance(fn, str) and fn in OPS) or any(fn is f for f in FUNCS.values()), fn
        assert ops.stats() == counts  # nothing built, counted or cleared
        ops.gemm(a.astype(np.float64), a.T.astype(np.float64))  # fallbacks still allowed
        assert ops.explain().path == "fallback"

    prop()


def test_allow_fallback_takes_only_a_bool() -> None:
    x = np.ones((2, 3))  # float64: the fallback

    @props(20)
    @given(flag=st.sampled_from([*SCALARS, np.bool_(False), np.bool_(True), np.array(False)]))
    def prop(flag: Any) -> None:
        try:
            if isinstance(flag, (bool, np.bool_)):
                ops.allow_fallback(flag)
                if flag:
                    assert ops.softmax(x).shape == x.shape
                else:
                    with pytest.raises(UnsupportedError, match="float64"):
                        ops.softmax(x)
            else:
                with pytest.raises(BadInputError, match="allow_fallback: expected True or False"):
                    ops.allow_fallback(flag)
                assert ops.softmax(x).shape == x.shape  # the policy is as it was
        finally:
            ops.allow_fallback(True)

    prop()


def test_stats_and_clear_cache() -> None:
    """``stats()`` counts calls by path; ``clear_cache()`` forgets them (and the kernels, not the build cache)."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    ops.clear_cache()
    assert ops.stats() == {}
    ops.softmax(x)
    ops.softmax(x)
    ops.softmax(x.astype(np.float64))
    got = ops.stats()
    assert set(got) <= {"builds", "kernel_hits", "tracea", "fallbacks", "slow_path", "fast_path"}
    assert got["fallbacks"] == 1 and got["tracea"] == 2 and got["kernel_hits"] >= 1
    assert got["slow_path"] == 2 and got["fast_path"] == 1  # the second float32 call was prepared by the first
    ops.clear_cache()
    assert ops.stats() == {}
    route = ops.Route(op="gemm", schedule={"odd": object()})  # a Route prints whatever its fields hold
    assert str(route).startswith("gemm: Tracea kernel")


def test_without_torch_the_pytorch_pieces_are_one_clear_error() -> None:
    """In a process where torch cannot be imported (blocked there as an uninstalled module is, whether or not
    this machine has it): the pieces are not offered, and naming one is one clear error with the pip command."""
    import subprocess
    import sys

    script = """
import sys
sys.modules["torch"] = None  # what an uninstalled torch looks like: find_spec None, import ModuleNotFoundError
import tracea.ops as ops
from tracea.doctor.errors import ToolchainMissingError
namespace = {}
exec("from tracea.ops import *", namespace)
assert {"gemm", "explain", "Route"} <= set(namespace), sorted(namespace)
for name in ops._TORCH_PIECES:
    assert name not in ops.__all__ and name not in namespace, name
    try:
        getattr(ops, name)
    except ToolchainMissingError as exc:
        assert "needs PyTorch" in str(exc) and "pip install" in (exc.hint or ""), exc
    else:
        raise AssertionError(f"{name} without torch did not raise")
try:
    ops.no_such_thing
except AttributeError:
    pass
else:
    raise AssertionError("an unknown name did not raise AttributeError")
print("ok", len(ops._TORCH_PIECES))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-2000:]


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed here")
def test_the_pytorch_pieces_take_hostile_arguments() -> None:
    import torch

    assert set(ops._TORCH_PIECES) <= set(ops.__all__)
    for bad in ("model", 3, [torch.nn.Conv2d(1, 1, 1)], np.ones(2)):
        for fn in (ops.patch_conv2d, ops.unpatch_conv2d):
            with pytest.raises(BadInputError, match="torch.nn.Module"):
                fn(bad)
    with pytest.raises(UnsupportedError):
        ops.TraceaConv2d.from_conv(torch.nn.Linear(2, 2))
    for bad in ("model", 3, [torch.nn.Linear(1, 1)], np.ones(2)):
        for fn in (ops.patch_linear, ops.unpatch_linear):
            with pytest.raises(BadInputError, match="torch.nn.Module"):
                fn(bad)
    with pytest.raises(UnsupportedError):
        ops.TraceaLinear.from_linear(torch.nn.Conv2d(1, 1, 1))
    assert ops.last_report() is None or isinstance(ops.last_report(), dict)
    assert isinstance(ops.format_report(), str)
    for bad in ("report", 3, {"replaced": []}, [None]):
        with pytest.raises(BadInputError, match="format_report"):
            ops.format_report(bad)
    ops.register_compile_backend()
    torch.manual_seed(0)
    layer, plain = ops.TraceaConv2d(2, 3, 3, padding=1), torch.nn.Conv2d(2, 3, 3, padding=1)
    plain.load_state_dict(layer.state_dict())
    good = [torch.randn(1, 2, 5, 5), torch.randn(2, 5, 5), torch.randn(2, 2, 6, 5)[..., ::2, :],
            torch.randn(1, 2, 5, 5).to(memory_format=torch.channels_last), torch.randn(0, 2, 5, 5)]
    bad = [torch.randn(1, 3, 5, 5), torch.randn(5, 5), torch.randn(1, 1, 2, 5, 5), torch.randn(1, 2, 1, 1)[:, :, :0],
           np.ones((1, 2, 5, 5), np.float32), "x", None, HUGE]

    @props(20)
    @given(x=st.sampled_from(good + bad), explain=st.booleans())
    def prop(x: Any, explain: bool) -> None:
        with torch.no_grad():
            try:
                got = ops.explain(layer, x) if explain else layer(x)
            except Exception as exc:  # noqa: BLE001 - checked on the next line
                one_line(exc)
                assert any(x is b for b in bad), exc
                return
            assert any(x is g for g in good), x
            if not explain:
                assert torch.allclose(got, plain(x), rtol=1e-4, atol=1e-5)

    prop()


COVERED = {"gemm", "scaled_gemm", "conv2d", "softmax", "attention", "explain", "allow_fallback", "clear_cache", "stats", "Route",
           "TraceaConv2d", "patch_conv2d", "unpatch_conv2d", "register_compile_backend", "last_report",
           "format_report", "TraceaLinear", "patch_linear", "unpatch_linear"}


def test_every_public_name_has_a_property() -> None:
    """The public names are read from tracea.ops itself (``__all__``, the PyTorch pieces it loads on first use,
    any public function or class its modules put in its namespace): a new one fails here until a property
    covers it (here, in test_ops_properties_hostile.py and _numpy.py for the four ops, in test_ops_scaled_gemm.py
    for scaled_gemm) and its name is
    added to COVERED."""
    public = set(ops.__all__) | set(ops._TORCH_PIECES) | {
        n for n, v in vars(ops).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
        and getattr(v, "__module__", "").startswith("tracea.ops")}
    assert public == COVERED, f"uncovered: {sorted(public - COVERED)}; gone: {sorted(COVERED - public)}"
