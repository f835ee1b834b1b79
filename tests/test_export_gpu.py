"""`tracea export --backend cuda` on a real GPU (skipped cleanly without one): each package is built by
CMake (CUDA::cuda_driver), and CTest runs its example, which verifies the kernel against a plain C
reference with double accumulation, shows the check failing on a corrupted result, and the C++ wrapper
throwing on a wrong shape; the example runs again on fresh random inputs."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

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


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is missing")
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_package_runs_and_verifies_on_this_gpu(tmp_path, case):
    pkg = tmp_path / "pkg"
    r = subprocess.run([sys.executable, "-m", "tracea", "export", *CASES[case], "--backend", "cuda", "--out", str(pkg)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert manifest["backend"] == "cuda"
    for cmd in (["cmake", "-S", str(pkg), "-B", str(pkg / "build")], ["cmake", "--build", str(pkg / "build")]):
        b = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    t = subprocess.run(["ctest", "--test-dir", str(pkg / "build"), "--output-on-failure", "-V"], capture_output=True,
                       text=True, timeout=600)
    assert t.returncode == 0 and "100% tests passed" in t.stdout, t.stdout[-4000:]
    seed = str(random.randrange(1, 2**31))
    run = subprocess.run([str(pkg / "build" / "tracea_example"), "--seed", seed], capture_output=True, text=True,
                         timeout=120)
    print(manifest["variant"], manifest["kernel"]["name"], run.stdout)
    assert run.returncode == 0 and ": ok" in run.stdout and "wrong shape refused" in run.stdout, \
        run.stdout + run.stderr


def test_a_host_pointer_is_refused_not_launched(tmp_path):
    """A view over host memory is a status and a message (cuPointerGetAttribute), never a faulting launch."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is missing")
    pkg = tmp_path / "pkg"
    r = subprocess.run([sys.executable, "-m", "tracea", "export", *CASES["softmax-fp32-odd"], "--backend", "cuda",
                        "--out", str(pkg)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    (pkg / "host_pointer.c").write_text("""#include <stdio.h>
#include "tracea.h"
int main(void) {
    static float x[7 * 333], y[7 * 333];
    int64_t s[] = TRACEA_SOFTMAX_X_SHAPE;
    TraceaTensorView vx = tracea_view(x, TRACEA_DTYPE_F32, 2, s), vy = tracea_view(y, TRACEA_DTYPE_F32, 2, s);
    TraceaStatus st = tracea_softmax(&vx, &vy, NULL);
    printf("%d %s\\n", (int)st, tracea_get_last_error());
    return st == TRACEA_ERROR_INVALID_ARGUMENT ? 0 : 1;
}
""")
    with (pkg / "CMakeLists.txt").open("a") as f:
        f.write("add_executable(host_pointer host_pointer.c)\ntarget_link_libraries(host_pointer PRIVATE tracea)\n")
    for cmd in (["cmake", "-S", str(pkg), "-B", str(pkg / "build")], ["cmake", "--build", str(pkg / "build")]):
        b = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    run = subprocess.run([str(pkg / "build" / "host_pointer")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "not memory CUDA knows" in run.stdout, run.stdout + run.stderr
