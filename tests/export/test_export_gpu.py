"""`tracea export --backend cuda` on a real GPU (skipped cleanly without one): each package is built by
CMake (CUDA::cuda_driver), and CTest runs its example, which verifies the kernel against a plain C
reference with double accumulation, shows the check failing on a corrupted result, and the C++ wrapper
throwing on a wrong shape; the example runs again on fresh random inputs. The Hopper GEMM's packages
(cuda-wgmma, sm_90a: their launcher encodes the TMA tensor maps) run where the GPU is an sm_90. Three
packages (two GEMMs, one of them wgmma on Hopper, and a softmax) installed into one prefix link into one C
and one C++ program through find_package, each result checked against NumPy."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

WGMMA = ["--variant", "cuda-wgmma.gemm"]
CASES = {
    "gemm-bf16-mma": ["gemm", "--m", "256", "--n", "128", "--k", "64", "--dtype", "bf16", "--variant",
                      "cuda-mma-sync.gemm"],
    "gemm-fp16-odd-epilogue": ["gemm", "--m", "333", "--n", "200", "--k", "77", "--dtype", "fp16", "--epilogue",
                               "bias,relu", "--variant", "cuda-mma-sync.gemm"],
    "gemm-fp32-simt-split-k": ["gemm", "--m", "64", "--k", "8192"],
    "conv2d-fp16-mma-odd": ["conv2d", "--n", "2", "--c", "3", "--h", "17", "--w", "19", "--k", "5", "--padding", "1",
                            "--bias", "--dtype", "fp16", "--variant", "cuda-mma-sync.conv2d"],
    "conv2d-fp32-simt": ["conv2d", "--c", "8", "--h", "15", "--w", "13", "--k", "12", "--stride", "2"],
    "softmax-fp32-odd": ["softmax", "--rows", "7", "--cols", "333"],
    "softmax-fp32-split-cooperative": ["softmax", "--rows", "4", "--cols", "100000"],
}


def _wgmma_schedule(**fields: object) -> str:
    return json.dumps({"schema_version": 1, "backend": "cuda", "core": "wgmma", **fields})


# The Hopper GEMM (sm_90 only): the hero, and schedules that take the launcher's other paths: a 2-block
# cluster along N with the TMA store, split-K over a non-persistent grid, ping-pong consumers with direct
# stores of C, both operands MN-major (column-major A), bias and relu, odd M.
WGMMA_CASES = {
    "gemm-fp16-wgmma-hero": ["gemm", "--m", "1024", "--n", "768", "--k", "512", "--dtype", "fp16", *WGMMA],
    "gemm-bf16-wgmma-odd-epilogue": ["gemm", "--m", "333", "--n", "200", "--k", "136", "--dtype", "bf16",
                                     "--layout-b", "col", "--epilogue", "bias,relu", *WGMMA],
    "gemm-fp16-wgmma-cluster-n": ["gemm", "--m", "512", "--n", "768", "--k", "256", "--dtype", "fp16", *WGMMA,
                                  "--schedule", _wgmma_schedule(bm=128, bn=256, stages=4, consumers=2, cluster=2,
                                                                cluster_axis="n", store="tma")],
    "gemm-bf16-wgmma-split-k": ["gemm", "--m", "256", "--n", "256", "--k", "4096", "--dtype", "bf16",
                                "--layout-a", "col", *WGMMA,
                                "--schedule", _wgmma_schedule(bm=128, bn=128, stages=4, consumers=2, persistent=False,
                                                              split=3, store="tma")],
    "gemm-fp16-wgmma-pingpong-direct": ["gemm", "--m", "384", "--n", "256", "--k", "192", "--dtype", "fp16", *WGMMA,
                                        "--schedule", _wgmma_schedule(bm=128, bn=128, stages=4, consumers=2,
                                                                      pingpong=True, store="direct")],
    # the decode GEMM fed by TMA (gemv_tma, the hero at <= 32 rows): its two maps, splits in a cluster; and a
    # row-major B with the splits' partials in the launcher's own workspace
    "gemm-bf16-decode-tma": ["gemm", "--m", "3", "--n", "4096", "--k", "1024", "--dtype", "bf16", "--layout-b", "col",
                             "--epilogue", "bias", *WGMMA],
    "gemm-fp16-decode-tma-workspace": ["gemm", "--m", "16", "--n", "1000", "--k", "3000", "--dtype", "fp16", *WGMMA,
                                       "--schedule", json.dumps({"schema_version": 1, "backend": "cuda",
                                                                 "core": "gemv_tma", "warps": 2, "stages": 3,
                                                                 "boxes": 1, "splits": 12})],
}
# The scaled 8-bit GEMM (cuda-wgmma.scaled_gemm): FP8 row scales on 128 x 128 tiles with C's TMA store (N off the
# tiles), block scales on 128 x 256 tiles, the swapped decode form with split-K (its maps exchanged), FP8 decode of
# at most 16 rows on the TMA gemv (maps over byte pairs), int8 into int32
SCALED_CASES = {
    "scaled-fp8-row-tile": ["scaled_gemm", "--m", "256", "--n", "520", "--k", "1040", "--dtype", "fp8e4m3",
                            "--out-dtype", "bf16", "--scale", "row"],
    "scaled-fp8-block128-wide": ["scaled_gemm", "--m", "256", "--n", "640", "--k", "1024", "--dtype", "fp8e4m3",
                                 "--out-dtype", "bf16", "--scale", "block128"],
    "scaled-fp8-decode-swapped": ["scaled_gemm", "--m", "24", "--n", "4096", "--k", "1024", "--dtype", "fp8e5m2",
                                  "--out-dtype", "fp16", "--scale", "tensor"],
    "scaled-fp8-decode-gemv": ["scaled_gemm", "--m", "5", "--n", "4096", "--k", "1024", "--dtype", "fp8e5m2",
                               "--out-dtype", "fp16", "--scale", "tensor"],
    "scaled-int8-int32": ["scaled_gemm", "--m", "300", "--n", "512", "--k", "1024", "--dtype", "int8",
                          "--out-dtype", "int32", "--scale", "none"],
    # an FP8 C quantized by scale_out, its amax a second output: tiles, the swapped decode form, the TMA gemv
    "scaled-fp8-out-e4m3-tile": ["scaled_gemm", "--m", "256", "--n", "520", "--k", "1040", "--dtype", "fp8e4m3",
                                 "--out-dtype", "fp8e4m3", "--scale", "row"],
    "scaled-fp8-out-e4m3-swapped": ["scaled_gemm", "--m", "24", "--n", "4096", "--k", "1024", "--dtype", "fp8e4m3",
                                    "--out-dtype", "fp8e4m3", "--scale", "tensor"],
    "scaled-fp8-out-e5m2-gemv": ["scaled_gemm", "--m", "5", "--n", "4096", "--k", "1024", "--dtype", "fp8e4m3",
                                 "--out-dtype", "fp8e5m2", "--scale", "row"],
    "scaled-fp8-out-e4m3-epilogue": ["scaled_gemm", "--m", "256", "--n", "512", "--k", "1024", "--dtype", "fp8e4m3",
                                     "--out-dtype", "fp8e4m3", "--scale", "row", "--epilogue", "bias,relu,residual"],
}
WGMMA_CASES.update(SCALED_CASES)


def _hopper() -> bool:
    """The first GPU is an sm_90 (the cuda-wgmma kernels run there only), as the doctor reads it."""
    from tracea.doctor import probe

    gpus = getattr(probe().nvidia, "devices", None) or []
    return bool(gpus) and (gpus[0].compute_capability or "").strip() == "9.0"


def _export(pkg: Path, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "tracea", "export", *args, "--backend", "cuda", "--out", str(pkg)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads((pkg / "manifest.json").read_text())


def _cmake(*cmd: str) -> None:
    b = subprocess.run(["cmake", *cmd], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]


def _build(pkg: Path, *defines: str) -> None:
    _cmake("-S", str(pkg), "-B", str(pkg / "build"), *defines)
    _cmake("--build", str(pkg / "build"), "-j8")


def _run_package(tmp_path: Path, args: list[str]) -> None:
    pkg = tmp_path / "pkg"
    manifest = _export(pkg, *args)
    assert manifest["backend"] == "cuda"
    _build(pkg)
    t = subprocess.run(["ctest", "--test-dir", str(pkg / "build"), "--output-on-failure", "-V"], capture_output=True,
                       text=True, timeout=600)
    assert t.returncode == 0 and "100% tests passed" in t.stdout, t.stdout[-4000:]
    seed = str(random.randrange(1, 2**31))
    run = subprocess.run([str(pkg / "build" / "example"), "--seed", seed], capture_output=True, text=True,
                         timeout=120)
    print(manifest["variant"], manifest["kernel"]["name"], run.stdout)
    if "fp8" in manifest["op"].get("out_dtype", ""):  # an FP8 C's amax, checked by the example beside C
        assert re.search(r"^amax .*: ok$", run.stdout, re.M), run.stdout
    assert run.returncode == 0 and ": ok" in run.stdout and "wrong shape refused" in run.stdout, \
        run.stdout + run.stderr


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is missing")
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_package_runs_and_verifies_on_this_gpu(tmp_path, case):
    _run_package(tmp_path, CASES[case])


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is missing")
@pytest.mark.parametrize("case", sorted(WGMMA_CASES))
def test_wgmma_gemm_package_runs_and_verifies_on_hopper(tmp_path, case):
    """The launcher's own tensor maps (cuTensorMapEncodeTiled), the persistent grid sized on this GPU."""
    if not _hopper():
        pytest.skip("the cuda-wgmma kernels run on an sm_90 GPU only")
    _run_package(tmp_path, WGMMA_CASES[case])


def test_a_host_pointer_is_refused_not_launched(tmp_path):
    """A view over host memory is a status and a message (cuPointerGetAttribute), never a faulting launch."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is missing")
    pkg = tmp_path / "pkg"
    _export(pkg, *CASES["softmax-fp32-odd"], "--prefix", "sm")
    (pkg / "host_pointer.c").write_text("""#include <stdio.h>
#include "sm/tracea.h"
int main(void) {
    static float x[7 * 333], y[7 * 333];
    int64_t s[] = SM_X_SHAPE;
    TraceaConstTensorView vx = tracea_const_view(x, TRACEA_DTYPE_F32, 2, s);
    TraceaTensorView vy = tracea_view(y, TRACEA_DTYPE_F32, 2, s);
    TraceaStatus st = sm_softmax(&vx, &vy, NULL);
    printf("%d %s\\n", (int)st, sm_get_last_error());
    return st == TRACEA_ERROR_INVALID_ARGUMENT ? 0 : 1;
}
""")
    with (pkg / "CMakeLists.txt").open("a") as f:
        f.write("add_executable(host_pointer host_pointer.c)\ntarget_link_libraries(host_pointer PRIVATE sm)\n")
    _build(pkg)
    run = subprocess.run([str(pkg / "build" / "host_pointer")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "not memory CUDA knows" in run.stdout, run.stdout + run.stderr


# ------------------------------------------------------------------------------- packages side by side

CUDA_MEMORY = """#include <cuda.h>
static int mem_setup(void) {
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return 1;
    if (cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) return 1;
    return cuCtxSetCurrent(ctx) != CUDA_SUCCESS;
}
static void* mem_alloc(size_t n) {
    CUdeviceptr p = 0;
    return cuMemAlloc(&p, n) == CUDA_SUCCESS ? (void*)(uintptr_t)p : NULL;
}
static int mem_upload(void* d, const void* h, size_t n) {
    return cuMemcpyHtoD((CUdeviceptr)(uintptr_t)d, h, n) != CUDA_SUCCESS;
}
static int mem_download(void* h, const void* d, size_t n) {
    return cuCtxSynchronize() != CUDA_SUCCESS || cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)d, n) != CUDA_SUCCESS;
}
"""


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("nm") is None, reason="cmake or nm is missing")
def test_cuda_packages_link_into_one_c_and_one_cpp_program(tmp_path):
    """Two GEMM packages (the wgmma one on Hopper, mma.sync elsewhere, and an mma.sync one of another shape)
    and a softmax, each built and installed into one prefix; a separate project finds all three, links them
    into a C and a C++ program, and every output matches NumPy. The libraries export their own names only."""
    from export_packages import defined_symbols
    from export_programs import check_outputs, consumer_cmake, program_c, program_cpp, write_inputs

    first = ["gemm", "--m", "512", "--n", "384", "--k", "256", "--dtype", "fp16",
             *(WGMMA if _hopper() else ["--variant", "cuda-mma-sync.gemm"])]
    specs = {"gemm-a": first,
             "gemm-b": ["gemm", "--m", "96", "--n", "80", "--k", "64", "--dtype", "fp16", "--epilogue", "bias",
                        "--variant", "cuda-mma-sync.gemm"],
             "softmax": ["softmax", "--rows", "7", "--cols", "333", "--prefix", "probs"]}
    install = tmp_path / "install"
    manifests = []
    for name, args in specs.items():
        pkg = tmp_path / name
        m = _export(pkg, *args)
        _build(pkg, f"-D{m['prefix']}_EXAMPLES=OFF")
        _cmake("--install", str(pkg / "build"), "--prefix", str(install))
        manifests.append(m)
    assert len({m["prefix"] for m in manifests}) == 3
    if _hopper():
        assert manifests[0]["variant"] == "cuda-wgmma.gemm" and "tensor_maps" in manifests[0]["kernel"]
    for m in manifests:
        p = m["prefix"]
        syms = defined_symbols([install / "lib" / f"lib{p}.a"])
        assert syms and all(s.startswith(f"{p}_") for s in syms), syms
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(consumer_cmake(manifests, link_extra="CUDA::cuda_driver",
                                                       head_extra="find_package(CUDAToolkit REQUIRED)\n"))
    (app / "main.c").write_text(program_c(manifests, CUDA_MEMORY))
    (app / "main.cpp").write_text(program_cpp(manifests, CUDA_MEMORY))
    _cmake("-S", str(app), "-B", str(app / "build"), f"-DCMAKE_PREFIX_PATH={install}")
    _cmake("--build", str(app / "build"), "-j8")
    data = tmp_path / "data"
    data.mkdir()
    inputs = write_inputs(data, manifests, seed=random.randrange(2**31))
    for exe, tag in (("side_by_side_c", "c"), ("side_by_side_cpp", "cpp")):
        run = subprocess.run([str(app / "build" / exe), str(data)], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        print("\n".join(check_outputs(data, manifests, inputs, tag)), run.stdout)
