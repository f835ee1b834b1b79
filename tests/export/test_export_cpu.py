"""`tracea export` for the CPU: a package is built by CMake with the system compiler and its example verifies
against a C reference (fresh inputs beside CTest's fixed ones, 16-bit storage too, the scaled 8-bit GEMM's tensors
of several types) and fails on a wrong result; the example's 16-bit and FP8 conversions are NumPy's and the IR's."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from export_packages import build, ctest, export, needs_cmake

CPU_CASES = {
    "gemm-done-when": ["gemm", "--m", "256", "--n", "128", "--k", "64", "--backend", "cpu"],
    "gemm-odd-epilogue": ["gemm", "--m", "37", "--n", "29", "--k", "19", "--layout-a", "col", "--layout-b", "col",
                          "--epilogue", "bias,gelu,scale,residual", "--alpha", "0.5", "--backend", "cpu"],
    "conv2d-odd": ["conv2d", "--n", "2", "--c", "3", "--h", "13", "--w", "11", "--k", "5", "--stride", "2",
                   "--padding", "1", "--bias", "--backend", "cpu"],
    "conv2d-nhwc-groups": ["conv2d", "--c", "6", "--h", "9", "--w", "7", "--k", "4", "--groups", "2", "--dilation",
                           "2", "--layout", "nhwc", "--backend", "cpu"],
    "softmax-odd": ["softmax", "--rows", "7", "--cols", "333", "--backend", "cpu"],
    "attention-gqa-causal-odd": ["attention", "--heads", "4", "--kv-heads", "2", "--seq", "37", "--seq-k", "45",
                                 "--head-dim", "64", "--causal", "--backend", "cpu"],
    "attention-window-bf16": ["attention", "--batch", "2", "--heads", "2", "--seq", "50", "--head-dim", "64",
                              "--window", "5,3", "--dtype", "bf16", "--backend", "cpu"],
    # ABI 3: a dtype a tensor (int8 operands, fp32 scales, int32 or 16-bit outputs), every scale mode, both B layouts
    "scaled-gemm-row-col": ["scaled_gemm", "--m", "37", "--n", "29", "--k", "200", "--scale", "row", "--backend", "cpu"],
    "scaled-gemm-none-int32": ["scaled_gemm", "--m", "16", "--n", "40", "--k", "96", "--scale", "none", "--out-dtype",
                               "int32", "--backend", "cpu"],
    "scaled-gemm-tensor-rowmajor-bf16": ["scaled_gemm", "--m", "33", "--n", "24", "--k", "64", "--scale", "tensor",
                                         "--layout-b", "row", "--out-dtype", "bf16", "--backend", "cpu"],
    "scaled-gemm-block128-fp16": ["scaled_gemm", "--m", "9", "--n", "200", "--k", "256", "--scale", "block128",
                                  "--out-dtype", "fp16", "--backend", "cpu"],
    # the fused epilogue: bias and residual views in C's type (bf16 here), after the scales
    "scaled-gemm-epilogue-bf16": ["scaled_gemm", "--m", "16", "--n", "64", "--k", "256", "--out-dtype", "bf16",
                                  "--epilogue", "bias,gelu,scale,residual", "--alpha", "0.5", "--backend", "cpu"],
}


@needs_cmake
@pytest.mark.parametrize("case", sorted(CPU_CASES))
def test_cpu_package_builds_and_verifies(tmp_path, case):
    pkg = export(tmp_path, *CPU_CASES[case])
    build(pkg)
    r = ctest(pkg)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "100% tests passed" in r.stdout
    seed = str(random.randrange(1, 2**31))  # fresh inputs beside CTest's fixed ones
    run = subprocess.run([str(pkg / "build" / "example"), "--seed", seed], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and ": ok" in run.stdout, run.stdout + run.stderr
    assert "wrong shape refused" in run.stdout  # the launcher answered a bad view with a status and a message


@needs_cmake
@pytest.mark.parametrize("args", [["gemm", "--m", "33", "--n", "40", "--k", "24", "--dtype", "bf16"],
                                  ["conv2d", "--c", "5", "--h", "9", "--w", "10", "--k", "7", "--dtype", "fp16"]],
                         ids=["gemm-bf16", "conv2d-fp16"])
def test_cpu_16bit_package_verifies(tmp_path, args):
    """The example's 16-bit storage (inputs rounded, the reference from the stored values) on the CPU kernels."""
    pkg = export(tmp_path, *args, "--backend", "cpu")
    build(pkg)
    r = ctest(pkg)
    assert r.returncode == 0, r.stdout[-3000:]


@needs_cmake
def test_the_check_fails_on_a_wrong_result(tmp_path):
    """--perturb, and a deliberately wrong kernel call (K one short), both make the example exit nonzero."""
    pkg = export(tmp_path, *CPU_CASES["gemm-done-when"])
    build(pkg)
    example = str(pkg / "build" / "example")
    r = subprocess.run([example, "--perturb"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "MISMATCH" in r.stdout
    launcher = pkg / "src" / "launcher.c"
    text = launcher.read_text()
    assert "dims[] = {256, 128, 64, 0}" in text
    launcher.write_text(text.replace("dims[] = {256, 128, 64, 0}", "dims[] = {256, 128, 63, 0}"))
    build(pkg)
    r = subprocess.run([example], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "MISMATCH" in r.stdout, r.stdout
    assert ctest(pkg).returncode != 0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is missing")
def test_the_examples_16bit_conversions_match_numpy(tmp_path):
    """ex_h2f / ex_bf2f decode every finite bit pattern exactly; ex_f2h / ex_f2bf round to nearest even."""
    import numpy as np

    from tracea.emitters.export_example import STORAGE

    rng = np.random.default_rng(0)
    floats = np.concatenate([rng.uniform(-4, 4, 4000), rng.uniform(-1e-4, 1e-4, 2000),
                             rng.standard_normal(2000) * 100]).astype(np.float32)
    (tmp_path / "f.bin").write_bytes(floats.tobytes())
    (tmp_path / "conv.c").write_text("#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n"
                                     + STORAGE["fp16"] + STORAGE["bf16"].split("\n", 2)[2] + """
int main(void) {
    for (uint32_t h = 0; h < 65536; ++h) printf("%a %a\\n", (double)ex_h2f((uint16_t)h), (double)ex_bf2f((uint16_t)h));
    FILE* f = fopen("f.bin", "rb");
    float v;
    while (fread(&v, 4, 1, f) == 1) printf("%u %u\\n", ex_f2h(v), ex_f2bf(v));
    return 0;
}
""")
    subprocess.run(["gcc", "-O1", "conv.c", "-o", "conv", "-lm"], cwd=tmp_path, check=True)
    lines = subprocess.run(["./conv"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split("\n")
    decoded = np.array([[float.fromhex(x) if x not in ("inf", "-inf", "nan", "-nan") else np.nan for x in ln.split()]
                        for ln in lines[:65536]])
    bits = np.arange(65536, dtype=np.uint16)
    half = bits.view(np.float16).astype(np.float64)
    with np.errstate(invalid="ignore"):
        bf = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    finite = np.isfinite(half)
    assert np.array_equal(decoded[finite, 0], half[finite])
    assert np.array_equal(decoded[np.isfinite(bf), 1], bf[np.isfinite(bf)])
    rounded = np.array([[int(x) for x in ln.split()] for ln in lines[65536:] if ln])
    assert np.array_equal(rounded[:, 0], floats.astype(np.float16).view(np.uint16))
    from tracea.kernels.dtypes import DType, to_storage

    assert np.array_equal(rounded[:, 1], to_storage(floats, DType.BF16).view(np.uint16))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is missing")
def test_the_examples_fp8_decoding_is_the_irs(tmp_path):
    """ex_f8 decodes every finite e4m3 and e5m2 code as kernels/dtypes.py does (the reference's values)."""
    import numpy as np

    from tracea.emitters.export_example import FP8
    from tracea.kernels import DType
    from tracea.kernels.dtypes import to_float64

    src = tmp_path / "f8.c"
    src.write_text("#include <math.h>\n#include <stdint.h>\n#include <stdio.h>\n" + FP8 + """
int main(void) {
    for (int b = 0; b < 256; ++b) printf("%.17g %.17g\\n", ex_f8((uint8_t)b, 3, 7), ex_f8((uint8_t)b, 2, 15));
    return 0;
}
""")
    exe = tmp_path / "f8"
    subprocess.run(["gcc", "-O1", str(src), "-o", str(exe), "-lm"], check=True, timeout=60)
    got = np.array([[float(x) for x in line.split()] for line in subprocess.run(
        [str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()])
    codes = np.arange(256, dtype=np.uint8)
    for col, dt in ((0, DType.FP8E4M3), (1, DType.FP8E5M2)):
        want = to_float64(codes, dt)
        finite = np.isfinite(want)
        assert np.array_equal(got[finite, col], want[finite]), dt
