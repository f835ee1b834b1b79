"""`tracea export`: a CPU package is built by CMake with the system compiler and its example verifies
against a C reference (and fails on a wrong result); a CUDA package for sm_80 renders without a GPU and
its launcher and example compile and link against cuda.h; bad input is one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
CMAKE = shutil.which("cmake")
needs_cmake = pytest.mark.skipif(CMAKE is None or shutil.which("cc") is None and shutil.which("gcc") is None,
                                 reason="cmake or a C compiler is missing")


def tracea(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracea", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def export(tmp_path: Path, *args: str, name: str = "pkg") -> Path:
    out = tmp_path / name
    r = tracea("export", *args, "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


def build(pkg: Path) -> None:
    for cmd in (["cmake", "-S", str(pkg), "-B", str(pkg / "build")], ["cmake", "--build", str(pkg / "build")]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def ctest(pkg: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctest", "--test-dir", str(pkg / "build"), "--output-on-failure"], capture_output=True,
                          text=True, timeout=600)


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
    run = subprocess.run([str(pkg / "build" / "tracea_example"), "--seed", seed], capture_output=True, text=True,
                         timeout=60)
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
    example = str(pkg / "build" / "tracea_example")
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


def test_manifest_names_what_was_exported(tmp_path):
    pkg = export(tmp_path, *CPU_CASES["conv2d-odd"])
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["op"]["op"] == "conv2d" and m["op"]["h"] == 13 and m["backend"] == "cpu"
    assert m["variant"].endswith(".conv2d") and m["schedule"] == json.loads((pkg / "schedule.json").read_text())
    assert m["schedule_source"].startswith("heuristic") or m["schedule_source"].startswith("tuned")
    assert m["abi_version"] == 1 and m["tracea_version"]
    for rel, digest in m["files"].items():
        assert hashlib.sha256((pkg / rel).read_bytes()).hexdigest() == digest, rel
    kernel = (pkg / m["kernel"]["source"]).read_text()
    assert hashlib.sha256(kernel.encode()).hexdigest() == m["kernel"]["source_sha256"]
    # the source is Tracea's rendering byte for byte
    from tracea.doctor import probe
    from tracea.emitters import registry
    from tracea.kernels import Conv2d

    b = registry.backend("cpu")
    op = Conv2d(n=2, c=3, h=13, w=11, k=5, r=3, s=3, stride=2, padding=1, bias=True)
    host = probe()
    sched = b.schedule_from_json(m["schedule"])
    assert b.rendering(op, registry.variant(m["variant"]), sched, host).sha256 == m["kernel"]["source_sha256"]
    h = (pkg / "include" / "tracea.h").read_text()
    assert "TraceaStatus tracea_conv2d(const TraceaTensorView* x, const TraceaTensorView* weight, " \
           "const TraceaTensorView* bias, TraceaTensorView* out, void* stream);" in h
    assert "#define TRACEA_CONV2D_OUT_SHAPE {2, 5, 7, 6}" in h


def test_a_tuned_schedule_is_used_when_stored(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tracea.doctor import probe
    from tracea.emitters import registry
    from tracea.kernels import Softmax
    from tracea.tuner import lookup
    from tracea_cli.app import app

    b = registry.backend("cpu")
    op = Softmax(rows=7, cols=333)
    from tracea.doctor.plan import plan

    variant = registry.variant(plan(op, probe(), registry.all_variants("cpu"), backend="cpu").require())
    space = b.search_space(op, variant, probe())
    hero = b.hero_schedule(op, variant, probe())
    tuned = next((s for s in space if s != hero), None)
    if tuned is None:
        pytest.skip("one candidate only: a tuned schedule cannot differ from the heuristic one")
    seen = []
    monkeypatch.setattr(lookup, "stored_schedule", lambda o, v, h, be, db=None: seen.append(v) or tuned.to_json())
    out = tmp_path / "pkg"
    r = CliRunner().invoke(app, ["export", "softmax", "--rows", "7", "--cols", "333", "--backend", "cpu",
                                 "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert seen == [variant.id] and m["schedule_source"].startswith("tuned")
    assert m["schedule"] == tuned.to_json() != hero.to_json()
    doc = json.loads(r.output)  # --json: what was written, machine-readable
    assert doc["schedule"] == m["schedule"] and doc["variant"] == m["variant"]
    assert sorted(doc["files"]) == sorted(str(out / rel) for rel in [*m["files"], "manifest.json"])


def _one_line_exit(r: subprocess.CompletedProcess[str], code: int, pattern: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:") and re.search(pattern, lines[0]), r.stderr
    assert all(ln.startswith(("error:", "hint:")) for ln in lines), r.stderr


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    gemm = ["gemm", "--m", "32", "--backend", "cpu"]
    _one_line_exit(tracea("export", "gemmm", "--m", "4", "--out", str(tmp_path / "a")), 2, "No such command")
    _one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "a"), "--bogus"), 2, "No such option")
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    _one_line_exit(tracea("export", *gemm, "--out", str(full)), 2, "not empty.*--force")
    assert [p.name for p in full.iterdir()] == ["mine.txt"]
    r = tracea("export", *gemm, "--out", str(full), "--force")
    assert r.returncode == 0 and (full / "include" / "tracea.h").is_file() and (full / "mine.txt").is_file()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _one_line_exit(tracea("export", *gemm, "--out", str(blocker / "sub")), 2, "cannot create")
    _one_line_exit(tracea("export", *gemm, "--out", str(blocker)), 2, "not a folder")
    _one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--schedule", "{nope"), 2, "--schedule")
    _one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--schedule", '{"mr": "x"}'), 2, "")
    _one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--arch", "sm_80"), 2, "--arch")
    _one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--variant", "cpu-portable.softmax"), 2,
                   "computes softmax, not gemm")
    _one_line_exit(tracea("export", *gemm, "--out", str(tmp_path / "b"), "--variant", "cuda-simt.gemm"), 2,
                   "cuda variant of gemm")
    assert not (tmp_path / "b").exists()  # nothing written for a refused command


def test_what_cannot_be_exported_is_refused_with_a_reason(tmp_path):
    r = tracea("export", "attention", "--heads", "2", "--seq", "64", "--head-dim", "64", "--block-mask", "0.5",
               "--block-size", "32", "--backend", "cpu", "--out", str(tmp_path / "a"))
    _one_line_exit(r, 3, "block-mask cannot be exported yet")
    if _nvrtc():  # the CUDA attention kernel's lse and tile lists are not in the ABI yet
        r = tracea("export", "attention", "--heads", "2", "--seq", "64", "--head-dim", "64", "--dtype", "bf16",
                   "--backend", "cuda", "--arch", "sm_80", "--out", str(tmp_path / "b"))
        _one_line_exit(r, 3, "takes lse.*which exported launchers do not provide")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ------------------------------------------------------------------------------------------------ CUDA

def _cuda_include() -> Path | None:
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda", "/usr/local/cuda-13.0"):
        if base and (Path(base) / "include" / "cuda.h").is_file():
            return Path(base) / "include"
    return None


def _nvrtc() -> bool:
    try:
        from tracea.emitters.cuda import compiler as nv

        nv.find_nvrtc()
        return True
    except Exception:  # noqa: BLE001 - no NVRTC: the CUDA tests skip
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc(), reason="NVRTC (cuda-bindings) is not installed")


@needs_nvrtc
@pytest.mark.skipif(_cuda_include() is None or shutil.which("gcc") is None or shutil.which("g++") is None,
                    reason="cuda.h or gcc/g++ is missing")
@pytest.mark.parametrize("args", [
    ["gemm", "--m", "256", "--n", "128", "--k", "64", "--dtype", "bf16"],
    ["conv2d", "--c", "3", "--h", "17", "--w", "19", "--k", "5", "--dtype", "fp16", "--bias"],
    ["softmax", "--rows", "7", "--cols", "333"],
    ["softmax", "--rows", "4", "--cols", "100000"],
    ["gemm", "--m", "64", "--k", "8192"],
], ids=["gemm-bf16", "conv2d-fp16", "softmax-fp32", "softmax-split-cooperative", "gemm-fp32-split-k-workspace"])
def test_cuda_package_for_sm80_compiles_and_links(tmp_path, args):
    pkg = export(tmp_path, *args, "--backend", "cuda", "--arch", "sm_80")
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["target"] == {"arch": "sm_80"} and m["backend"] == "cuda"
    name = m["kernel"]["name"]
    assert (pkg / "kernel" / f"{name}.cubin").read_bytes()[:4] == b"\x7fELF"
    ptx = (pkg / "kernel" / f"{name}.ptx").read_text()
    assert ".target sm_80" in ptx and f".entry {name}(" in ptx
    if args[0] == "gemm" and "bf16" in args:
        assert m["variant"] == "cuda-mma-sync.gemm" and "mma.sync" in (pkg / "kernel" / f"{name}.cu").read_text()
    launcher = (pkg / "src" / "launcher.c").read_text()
    assert "cuLaunch" in launcher and "cuda_runtime" not in launcher and "#include <cuda.h>" in launcher
    if args[1:3] == ["--rows", "4"]:  # the split softmax: its partials and counters, all blocks resident
        assert "cuLaunchCooperativeKernel" in launcher and "#define TR_NSCRATCH 2" in launcher
    if args[-1] == "8192":  # the SIMT K split: a zeroed workspace the launcher owns
        assert "p_workspace = tr_scratch[0]" in launcher and "#define TR_NSCRATCH 1" in launcher
    inc = _cuda_include()
    objs = []
    for src in ("src/tracea_abi.c", "src/launcher.c", "src/kernel_image.c", "example.c"):
        obj = tmp_path / (Path(src).stem + ".o")
        r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", str(pkg / src), "-I",
                            str(pkg / "include"), "-I", str(pkg / "src"), "-I", str(inc), "-o", str(obj)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        objs.append(obj)
    r = subprocess.run(["g++", "-std=c++17", "-Wall", "-Werror", "-c", str(pkg / "example.cpp"), "-I",
                        str(pkg / "include"), "-I", str(inc), "-o", str(tmp_path / "example_cpp.o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # link against a stand-in libcuda of exactly the symbols used: every one returns CUDA_ERROR_NO_DEVICE
    nm = subprocess.run(["nm", "-u", *map(str, objs)], capture_output=True, text=True, check=True).stdout
    used = sorted({ln.split()[-1] for ln in nm.splitlines() if re.fullmatch(r"\s*U cu\w+", ln)})
    assert {"cuLaunchKernel", "cuLaunchCooperativeKernel"} & set(used) and "cuModuleLoadData" in used
    assert all(not s.startswith("cuda") for s in used)  # the driver API only, no runtime
    stub = tmp_path / "stub.c"
    stub.write_text("".join(f"int {s}(void) {{ return 100; }}\n" for s in used))
    subprocess.run(["gcc", "-shared", "-fPIC", str(stub), "-o", str(tmp_path / "libcuda.so")], check=True)
    exe = tmp_path / "example"
    r = subprocess.run(["gcc", *map(str, objs), "-L", str(tmp_path), "-lcuda", "-lm", "-pthread", "-o", str(exe)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)})
    assert run.returncode == 1 and "cuInit failed" in run.stderr, run.stderr  # no GPU: said, not crashed
    if CMAKE is None:
        return
    # the package's own CMake file, its libcuda the stand-in (whichever way it finds the driver library)
    build_dir = pkg / "build"
    cfg = subprocess.run(["cmake", "-S", str(pkg), "-B", str(build_dir), f"-DCUDA_cuda_driver_LIBRARY={tmp_path}/libcuda.so",
                          f"-DTRACEA_CUDA_DRIVER={tmp_path}/libcuda.so", f"-DTRACEA_CUDA_INCLUDE={inc}",
                          f"-DCUDAToolkit_ROOT={inc.parent}"], capture_output=True, text=True, timeout=300)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    b = subprocess.run(["cmake", "--build", str(build_dir)], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    run = subprocess.run([str(build_dir / "tracea_example")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)})
    assert run.returncode == 1 and "cuInit failed" in run.stderr, run.stderr


@needs_nvrtc
def test_a_hopper_tma_kernel_is_refused_with_a_hint(tmp_path):
    r = tracea("export", "gemm", "--m", "256", "--dtype", "bf16", "--backend", "cuda", "--arch", "sm_90a",
               "--out", str(tmp_path / "a"))
    _one_line_exit(r, 3, "cuTensorMapEncodeTiled")
    assert "--variant cuda-mma-sync.gemm" in r.stderr
    pkg = export(tmp_path, "gemm", "--m", "256", "--dtype", "bf16", "--backend", "cuda", "--arch", "sm_90a",
                 "--variant", "cuda-mma-sync.gemm", name="mma")
    assert json.loads((pkg / "manifest.json").read_text())["variant"] == "cuda-mma-sync.gemm"


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
