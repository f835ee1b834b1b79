"""Tracea's Metal kernels on a caller's ``mps`` tensors (emitters/metal/ops_mps.py) and how ``tracea.ops``
reaches them (tracea_cli/ops: the backend by the tensors' device type, the kernel's ``launch_tensors``). An mps
tensor cannot exist off a Mac, so here: the dispatch sizes, the argument order and the scalars' bytes; the
routing's choice between a kernel's ``launch_tensors`` and ``launch_on``; one clear line where MPS is absent.
On a Mac with MPS (skipped elsewhere): a GEMM on mps tensors through the kernel and through tracea.ops."""

from __future__ import annotations

import numpy as np
import pytest

from tracea.doctor.errors import BadInputError, UnsupportedError
from tracea.emitters.metal import ops_mps, runtime
from tracea.emitters.metal.core import Launch
from tracea.kernels import Gemm, tolerance
from tracea.kernels.dtypes import DType
from tracea_cli.ops import _dispatch, _engine

ARGS = (("in", "b"), ("in", "a"), ("out", None), ("i32", 7), ("u32", 3_000_000_000), ("f32", -2.5))
LAUNCH = Launch("tr_metal_test", "kernel void tr_metal_test() {}", (5, 3, 2), (64, 2, 1), ARGS, 0)


def test_threads_are_the_grid_of_whole_threadgroups():
    assert ops_mps.dispatch_sizes(LAUNCH) == ((320, 6, 2), (64, 2, 1))


def test_the_arguments_follow_the_launch_and_the_scalars_keep_their_bytes():
    feeds, out = {"a": object(), "b": object(), "extra": object()}, object()
    scalars = ops_mps.scalar_tensors(LAUNCH, lambda arr: arr)  # the one-element arrays a tensor is made from
    assert sorted(scalars) == [3, 4, 5]
    assert scalars[3].dtype == np.int32 and scalars[3].tolist() == [7]
    assert scalars[4].dtype == np.int32 and scalars[4].tobytes() == np.uint32(3_000_000_000).tobytes()
    assert scalars[5].dtype == np.float32 and scalars[5].tolist() == [-2.5]
    args = ops_mps.launch_args(LAUNCH, feeds, out, scalars)
    assert args[:3] == [feeds["b"], feeds["a"], out] and args[3:] == [scalars[3], scalars[4], scalars[5]]
    with pytest.raises(BadInputError) as info:
        ops_mps.launch_args(LAUNCH, {"a": object()}, out, scalars)
    assert "no input 'b'" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.skipif(ops_mps.mps_problem() is None, reason="MPS runs here")
def test_without_mps_the_shader_and_the_kernels_tensor_launch_refuse_in_one_line():
    why = ops_mps.mps_problem()
    assert why and "\n" not in why
    with pytest.raises(UnsupportedError) as info:
        ops_mps.MpsShader(LAUNCH)
    assert str(info.value) == f"Tracea's Metal kernels cannot run on mps tensors here: {why}"
    kernel = runtime.OpKernel(Gemm(m=4, n=4, k=4, dtype=DType.FP32), LAUNCH)
    with pytest.raises(UnsupportedError):
        kernel.launch_tensors({}, object())


# ------------------------------------------------------------------------------------ tracea.ops' routing

class TensorLauncher:
    def __init__(self):
        self.calls = []

    def launch_tensors(self, feeds, out):
        self.calls.append((feeds, out))


class PointerLauncher:
    def launch_on(self, ptrs, stream):
        raise AssertionError("not for tensors a kernel binds itself")


def test_a_kernel_that_binds_tensors_is_launched_on_them_not_on_pointers():
    torch = pytest.importorskip("torch")
    assert _engine.launches_in_place(TensorLauncher()) and _engine.launches_in_place(PointerLauncher())
    assert not _engine.launches_in_place(object())  # passed over for device tensors
    from tracea_cli.ops._arrays import describe

    x, out = torch.zeros(4, 4), torch.zeros(4, 4)
    k = TensorLauncher()
    _dispatch._launch(k, "cuda", describe("a", x), {"a": x}, out)  # an ON_DEVICE backend: no host view, no stream
    assert len(k.calls) == 1 and k.calls[0][0]["a"] is x and k.calls[0][1] is out


def test_mps_tensors_on_a_machine_without_an_apple_gpu_take_the_vendor_call_and_say_why():
    _engine.clear()
    try:
        with pytest.raises(_engine.Fallback) as info:
            _engine.backend_for("mps")
    finally:
        _engine.clear()
    if info.value.reason.startswith("this machine has"):
        assert info.value.reason == "this machine has no mps device the metal backend can use"
    else:  # the backend is not registered in this tree
        assert info.value.reason == "no Tracea backend runs on mps tensors"


# ------------------------------------------------------------------------------------- on a Mac with MPS

@pytest.mark.skipif(ops_mps.mps_problem() is not None, reason=f"needs MPS: {ops_mps.mps_problem()}")
def test_a_gemm_on_mps_tensors_in_place():
    import torch

    from tracea.emitters.metal.cores.gemm import gemm_launch
    from tracea.emitters.metal.gemm import tiled_hero

    op = Gemm(m=96, n=80, k=64, dtype=DType.FP16)
    kernel = runtime.OpKernel(op, gemm_launch(op, tiled_hero(op.m, op.n, "fp16", None)))
    inputs = op.random_inputs(np.random.default_rng(6))
    a, b = (torch.from_numpy(inputs[n]).to("mps") for n in ("a", "b"))
    out = torch.full((op.m, op.n), float("nan"), dtype=torch.float16, device="mps")
    kernel.launch_tensors({"a": a, "b": b}, out)
    got = out.float().cpu().double().numpy()
    ref = op.reference(inputs)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) <= tolerance(op)
    arrays = np.full((op.m, op.n), np.nan, np.float16)  # the runner for NumPy arrays without PyObjC
    kernel.shader().run_arrays(inputs, arrays)
    assert np.linalg.norm(arrays.astype(np.float64) - ref) / np.linalg.norm(ref) <= tolerance(op)
    assert kernel.shader().time_arrays(inputs, arrays, 1, 5).runs == 5


@pytest.mark.skipif(ops_mps.mps_problem() is not None or runtime.metal_problem() is not None,
                    reason="needs MPS and an Apple GPU Metal runs on")
def test_tracea_ops_routes_mps_tensors_to_the_metal_kernels():
    import torch

    import tracea.ops

    a = torch.randn(64, 48, dtype=torch.float16, device="mps")
    b = torch.randn(48, 40, dtype=torch.float16, device="mps")
    tracea.ops.allow_fallback(False)
    try:
        y = tracea.ops.gemm(a, b)
    finally:
        tracea.ops.allow_fallback(True)
    route = tracea.ops.explain()
    assert route.path == "tracea" and route.backend == "metal" and y.device.type == "mps"
    ref = (a.float() @ b.float()).cpu()
    assert float((y.float().cpu() - ref).norm() / ref.norm()) <= 2e-3
