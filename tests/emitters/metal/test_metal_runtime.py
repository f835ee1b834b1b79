"""The Metal backend's host side (emitters/metal/compiler.py, dispatch.py, runtime.py, torch_mps.py) where no
Mac is: one clear line where Metal or its compiler is absent; the offline compile's commands, cache and errors
through a stand-in ``xcrun``; the argument packing, launch limits and timings with real NumPy; PyTorch's
baseline calls (the same code, on the CPU device) against the references; the verify-then-time's result
fields. On a Mac with Metal, a GEMM through ``MetalKernel`` against the reference (skipped elsewhere)."""

from __future__ import annotations

import os
import platform
import stat
import struct
import sys

import numpy as np
import pytest

from tracea.doctor.errors import (
    BadInputError,
    CompileError,
    LaunchError,
    ToolchainMissingError,
    UnsupportedError,
)
from tracea.emitters.metal import compiler, dispatch, runtime, torch_mps
from tracea.emitters.metal.core import Launch
from tracea.emitters.timing import Timing
from tracea.kernels import Attention, Conv2d, Gemm, Softmax, relative_error, tolerance
from tracea.kernels.dtypes import DType, poison, to_float64, to_storage

ARGS = (("in", "a"), ("in", "b"), ("out", None), ("i32", -5), ("u32", 4_000_000_000), ("f32", 0.5))
LAUNCH = Launch("tr_metal_test", "kernel void tr_metal_test() {}", (3, 2, 1), (128, 1, 1), ARGS, 4096)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, text
    return text


# ------------------------------------------------------------------------------ Metal absent: one line

def test_metal_problem_names_the_platform_in_one_line():
    assert runtime.platform_problem("Darwin") is None
    assert runtime.platform_problem("Linux") == "not macOS (Linux)"
    assert runtime.family_problem("Apple M1 Pro", True) is None
    assert "family 7" in runtime.family_problem("AMD Radeon Pro 5500M", False)
    if platform.system() != "Darwin":
        assert runtime.metal_problem() == f"not macOS ({platform.system()})"


@pytest.mark.skipif(runtime.metal_problem() is None, reason="Metal runs here")
def test_without_metal_a_kernel_and_an_op_kernel_refuse_in_one_line():
    with pytest.raises(UnsupportedError) as info:
        runtime.MetalKernel(LAUNCH)
    assert _one_line(info.value) == f"Metal kernels cannot run here: {runtime.metal_problem()}"
    assert "pyobjc-framework-Metal" in info.value.hint
    op = Gemm(m=4, n=4, k=4, dtype=DType.FP32)
    kernel = runtime.OpKernel(op, LAUNCH)  # made lazily: refuses only when asked to run
    why = runtime.kernels_problem()
    if why is not None:  # neither PyObjC's Metal nor PyTorch's MPS: both reasons
        assert _one_line(why).startswith(f"{runtime.metal_problem()}; and on mps tensors: ")
        with pytest.raises(UnsupportedError) as info:
            kernel.check()
        assert _one_line(info.value) == f"Metal kernels cannot run here: {why}"
        with pytest.raises(UnsupportedError):
            kernel(op.random_inputs(np.random.default_rng(0)), np.zeros((4, 4), np.float32))


# ---------------------------------------------------------------------------------- the offline compiler

FAKE_XCRUN = r'''#!{python}
import os, shutil, sys
args = sys.argv[1:]
with open(os.environ["FAKE_XCRUN_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
assert args[:2] == ["-sdk", "macosx"], args
tool, rest = args[2], args[3:]
if tool == "--find":
    print("/Applications/Xcode.app/usr/bin/" + rest[0])
elif rest == ["--version"]:
    if os.environ.get("FAKE_XCRUN_NO_TOOLCHAIN"):
        print("error: cannot execute tool 'metal' due to missing Metal Toolchain; use: xcodebuild "
              "-downloadComponent MetalToolchain", file=sys.stderr)
        sys.exit(1)
    print("Apple metal version 32023.404 (metalfe-32023.404.2)")
elif tool == "metal":
    src, out = rest[rest.index("-c") + 1], rest[rest.index("-o") + 1]
    text = open(src).read()
    if "#error" in text:
        print(src + ":3:2: error: the kernel is broken", file=sys.stderr)
        print("1 error generated.", file=sys.stderr)
        sys.exit(1)
    open(out, "w").write("AIR " + " ".join(rest[:rest.index("-c")]) + "\n" + text)
elif tool == "metallib":
    shutil.copy(rest[0], rest[rest.index("-o") + 1])
'''


@pytest.fixture
def fake_xcrun(tmp_path, monkeypatch):
    """An ``xcrun`` on PATH that answers as Apple's does (what it was asked is logged)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "xcrun"
    tool.write_text(FAKE_XCRUN.replace("{python}", sys.executable))
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "xcrun.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_XCRUN_LOG", str(log))
    monkeypatch.setenv("TRACEA_HOME", str(tmp_path / "home"))
    compiler.find_toolchain.cache_clear()
    yield log
    compiler.find_toolchain.cache_clear()


def test_without_xcrun_the_compiler_says_so_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no xcrun anywhere
    compiler.find_toolchain.cache_clear()
    try:
        tc = compiler.find_toolchain()
        assert not tc.found and tc.reason.startswith("no Metal toolchain: xcrun is macOS's")
        with pytest.raises(ToolchainMissingError) as info:
            compiler.compile_library(LAUNCH.source, LAUNCH.name, "apple8")
        assert _one_line(info.value) == tc.reason and "MetalToolchain" in info.value.hint
    finally:
        compiler.find_toolchain.cache_clear()


def test_a_target_that_is_no_apple7_or_later_family_is_refused_before_any_tool():
    for bad in ("apple6", "gfx90a", "m1", ""):
        with pytest.raises(BadInputError) as info:
            compiler.compile_library(LAUNCH.source, LAUNCH.name, bad)
        assert "apple7" in _one_line(info.value)
    assert [compiler.check_arch(a) for a in ("apple7", "Apple8", " apple9 ")] == [7, 8, 9]


def test_the_library_is_compiled_with_metal_3_0_and_ieee_math_then_cached(fake_xcrun):
    tc = compiler.find_toolchain()
    assert tc.found and tc.version == "Apple metal version 32023.404 (metalfe-32023.404.2)"
    lib = compiler.compile_library(LAUNCH.source, LAUNCH.name, "apple8")
    assert lib.suffix == ".metallib" and lib.name.startswith(f"{LAUNCH.name}-apple8-")
    assert lib.read_text().startswith("AIR -std=metal3.0 -fno-fast-math\n" + LAUNCH.source)
    calls = fake_xcrun.read_text().splitlines()
    assert any(c.startswith("-sdk macosx metal -std=metal3.0 -fno-fast-math -c ") for c in calls)
    assert any(c.startswith("-sdk macosx metallib ") for c in calls)
    assert compiler.compile_library(LAUNCH.source, LAUNCH.name, "apple8") == lib  # the cache: no tool ran
    assert fake_xcrun.read_text().splitlines() == calls
    other = compiler.compile_library(LAUNCH.source, LAUNCH.name, "apple9")  # another target: its own entry
    assert other != lib


def test_a_compile_error_is_the_compilers_first_lines_in_one_line(fake_xcrun):
    with pytest.raises(CompileError) as info:
        compiler.compile_library("#include <metal_stdlib>\n\n#error no\n", "broken", "apple7")
    text = _one_line(info.value)
    assert text.startswith("metal failed for broken (apple7): ") and "error: the kernel is broken" in text


def test_xcode_without_its_metal_toolchain_component_says_which_command_installs_it(fake_xcrun, monkeypatch):
    monkeypatch.setenv("FAKE_XCRUN_NO_TOOLCHAIN", "1")
    tc = compiler.find_toolchain()
    assert not tc.found and "xcodebuild -downloadComponent MetalToolchain" in tc.reason
    with pytest.raises(ToolchainMissingError) as info:
        compiler.compile_library(LAUNCH.source, LAUNCH.name, "apple7")
    assert _one_line(info.value).startswith("the Metal compiler does not run: error: cannot execute tool 'metal'")


# ------------------------------------------------------------------------------ the launch, without Metal

def test_arguments_are_packed_in_buffer_order_with_the_scalars_bytes():
    a, b, out = np.arange(6, dtype=np.float32), np.arange(3, dtype=np.uint16), np.zeros((2, 2), np.float16)
    packed = dispatch.pack(LAUNCH, {"b": b, "a": a, "unused": a}, out)
    assert [(i, kind) for i, kind, _ in packed] == [(0, "buffer"), (1, "buffer"), (2, "buffer"), (3, "bytes"),
                                                    (4, "bytes"), (5, "bytes")]
    assert packed[0][2] is a and packed[1][2] is b and packed[2][2] is out  # no copy of any array
    assert packed[3][2] == struct.pack("<i", -5)
    assert packed[4][2] == struct.pack("<I", 4_000_000_000)
    assert packed[5][2] == struct.pack("<f", 0.5)


def _bad_buffers(case):
    bufs, out = {"a": np.zeros(4, np.float32), "b": np.zeros(4, np.uint16)}, np.zeros(4, np.float16)
    if case == "missing":
        del bufs["a"]
    elif case == "float64":
        bufs["a"] = np.zeros(4)
    elif case == "strided-input":
        bufs["a"] = np.zeros((4, 4), np.float32).T
    elif case == "strided-out":
        out = np.zeros(8, np.float16)[::2]
    elif case == "read-only-out":
        out.setflags(write=False)
    return bufs, out


@pytest.mark.parametrize("case, message", [
    ("missing", "no input 'a'"), ("float64", "float64 array is not a storage array"),
    ("strided-input", "not C-contiguous"), ("strided-out", "not C-contiguous"), ("read-only-out", "read-only")])
def test_bad_buffers_are_refused_in_one_line(case, message):
    bufs, out = _bad_buffers(case)
    with pytest.raises(BadInputError) as info:
        dispatch.pack(LAUNCH, bufs, out)
    assert message in _one_line(info.value)


def test_scalars_of_the_wrong_kind_or_range_and_launches_without_one_output_are_refused():
    assert dispatch.scalar_array("u32", 2**32 - 1).tobytes() == b"\xff\xff\xff\xff"
    for kind, value in (("i32", 2**31), ("u32", -1), ("i32", True), ("i32", 1.5), ("f64", 1.0)):
        with pytest.raises(BadInputError):
            dispatch.scalar_array(kind, value)
    two = Launch("k", "", (1, 1, 1), (32, 1, 1), (("out", None), ("out", None)))
    with pytest.raises(BadInputError, match="names 2"):
        dispatch.pack(two, {}, np.zeros(1, np.float32))


def test_the_launch_must_fit_its_pipeline_and_the_threadgroup_memory():
    dispatch.check_launch(LAUNCH, 1024, 32768, 0)  # fits
    with pytest.raises(LaunchError, match="its pipeline takes at most 96"):
        dispatch.check_launch(LAUNCH, 96, 32768)
    with pytest.raises(LaunchError, match="5000 bytes of threadgroup memory"):
        dispatch.check_launch(LAUNCH, 1024, 4096, static_memory=5000)
    odd = Launch("k", "", (1, 1, 1), (48, 1, 1), ())
    with pytest.raises(LaunchError, match="not a multiple of 32"):
        dispatch.check_launch(odd, 1024, 32768)
    empty = Launch("k", "", (0, 1, 1), (32, 1, 1), ())
    with pytest.raises(BadInputError, match="must be positive"):
        dispatch.check_launch(empty, 1024, 32768)


def test_gpu_seconds_become_a_timing_in_milliseconds():
    t = dispatch.timing_of([0.003, 0.001, 0.002, 0.010])
    assert (t.p50_ms, t.min_ms, t.p95_ms, t.runs) == (pytest.approx(2.5), pytest.approx(1.0), pytest.approx(10.0), 4)
    with pytest.raises(LaunchError):
        dispatch.timing_of([0.001, 0.0])  # a command buffer the GPU did not run has no time


# ------------------------------------------------------------- PyTorch's calls (on the CPU device here)

OPS = [
    Gemm(m=33, n=17, k=40, dtype=DType.BF16, epilogue="bias,gelu"),
    Gemm(m=16, n=24, k=8, dtype=DType.FP16, layout_a="col", layout_b="col"),
    Conv2d(n=2, c=8, h=9, w=7, k=16, r=3, s=3, stride=(2, 1), padding=(1, 1), layout="nhwc", dtype=DType.FP16),
    Softmax(rows=7, cols=100, dtype=DType.FP32),
    Attention(batch=1, heads=4, kv_heads=2, seq_q=24, seq_k=24, head_dim=16, causal=True, dtype=DType.FP16),
]


@pytest.mark.parametrize("op", OPS, ids=lambda op: f"{op.kind}-{op.dtype.value}")
def test_the_baseline_calls_compute_the_reference(op):
    pytest.importorskip("torch")
    inputs = op.random_inputs(np.random.default_rng(1))
    ref = op.reference(inputs)
    base = torch_mps.baseline(op, inputs, device="cpu")
    assert base.run is not None and base.reason is None
    assert base.name.startswith("PyTorch CPU ") and "cuBLAS" not in base.name and "(CPU" not in base.name
    assert torch_mps.torch_rel_err(base.run, ref) <= tolerance(op)  # an NHWC conv's permutes included


def test_on_a_machine_without_mps_the_mps_baseline_says_why():
    torch = pytest.importorskip("torch")
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    op = OPS[0]
    base = torch_mps.baseline(op, op.random_inputs(np.random.default_rng(0)))
    assert base.run is None and base.name.startswith("PyTorch MPS ") and _one_line(base.reason).startswith("torch sees no MPS")


class ReferenceKernel:
    """A built kernel's stand-in: the op's reference rounded to its storage type (or less: ``write`` the
    number of elements it writes; ``fail`` an exception it raises)."""

    def __init__(self, op, write=None, fail=None):
        self.op, self.write, self.fail = op, write, fail

    def __call__(self, inputs, out):
        if self.fail is not None:
            raise self.fail
        y = to_storage(self.op.reference(inputs), self.op.output_dtype).reshape(-1)
        n = y.size if self.write is None else self.write
        out.reshape(-1)[:n] = y[:n]

    def time(self, inputs, warmup=1, repeats=10, flush_l2=True) -> Timing:
        out = np.empty(self.op.output_shape(), self.op.output_dtype.storage)
        return torch_mps.time_host(lambda: self(inputs, out), warmup, repeats)


def test_a_kernel_is_verified_on_a_poisoned_output_before_anything_is_timed():
    op = Gemm(m=8, n=12, k=16, dtype=DType.FP16)
    inputs = op.random_inputs(np.random.default_rng(2))
    ref, tol = op.reference(inputs), tolerance(op)
    err, failed = torch_mps.verify(ReferenceKernel(op), op, inputs, ref, tol)
    assert failed is None and err <= tol
    err, failed = torch_mps.verify(ReferenceKernel(op, write=8 * 12 - 1), op, inputs, ref, tol)
    assert failed["status"] == "wrong_result" and err == float("inf")  # the one element it left is poison
    _, failed = torch_mps.verify(ReferenceKernel(op, fail=LaunchError("tr_metal_gemm failed on the GPU: x")),
                                 op, inputs, ref, tol)
    assert failed == {"status": "runtime_failed", "error": "LaunchError: tr_metal_gemm failed on the GPU: x"}


def test_the_bench_times_the_kernel_and_the_baseline_in_one_run():
    pytest.importorskip("torch")
    op = Conv2d(n=1, c=4, h=6, w=6, k=8, r=3, s=3, padding=(1, 1), layout="nhwc", dtype=DType.FP32)
    inputs = op.random_inputs(np.random.default_rng(3))
    ref = op.reference(inputs)
    fields = torch_mps.bench(ReferenceKernel(op), op, inputs, ref, tolerance(op), 1, 3, device="cpu")
    assert fields["status"] == "ok" and fields["rel_err"] <= tolerance(op)
    assert fields["baseline_name"].startswith("PyTorch CPU ") and fields["baseline_reason"] is None
    assert fields["baseline_rel_err"] <= tolerance(op)
    for key in ("tracea", "baseline"):
        assert isinstance(fields[key], Timing) and fields[key].runs == 10 and fields[key].p50_ms > 0  # repeats >= 10
    wrong = torch_mps.bench(ReferenceKernel(op, write=0), op, inputs, ref, tolerance(op), 1, 3, device="cpu")
    assert wrong["status"] == "wrong_result" and "tracea" not in wrong


def test_the_vendor_figures_alone_and_beside_the_kernel():
    pytest.importorskip("torch")
    op = Softmax(rows=4, cols=64, dtype=DType.FP16)
    inputs = op.random_inputs(np.random.default_rng(4))
    ref = op.reference(inputs)
    alone = torch_mps.vendor(op, inputs, ref, 1, 10, device="cpu")
    assert set(alone) == {"name", "p50_ms", "p95_ms", "rel_err"} and alone["rel_err"] <= tolerance(op)
    both = torch_mps.vendor(op, inputs, ref, 1, 10, ReferenceKernel(op), device="cpu")
    assert both["interleaved"] and both["tracea_p50_ms"] > 0 and both["p50_ms"] > 0


# ------------------------------------------------------------------------------------ on a Mac with Metal

@pytest.mark.skipif(runtime.metal_problem() is not None, reason=f"needs Metal: {runtime.metal_problem()}")
@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16, DType.FP32], ids=lambda d: d.value)
def test_a_gemm_through_metal_matches_the_reference(dtype):
    from tracea.emitters.metal.cores.gemm import gemm_launch
    from tracea.emitters.metal.gemm import tiled_hero

    op = Gemm(m=130, n=70, k=96, dtype=dtype, epilogue="bias,gelu")
    kernel = runtime.MetalKernel(gemm_launch(op, tiled_hero(op.m, op.n, dtype.value, None)))
    inputs = op.random_inputs(np.random.default_rng(5))
    out = np.empty(op.output_shape(), op.output_dtype.storage)
    out.fill(poison(out.dtype))  # every element must be written
    kernel.run(inputs, out)
    assert relative_error(to_float64(out, op.output_dtype), op.reference(inputs)) <= tolerance(op)
    seconds = kernel.time(inputs, out, warmup=1, repeats=5)
    assert len(seconds) == 5 and all(s > 0 for s in seconds)
