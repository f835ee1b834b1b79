"""`tracea export`: a CPU package is built by CMake with the system compiler and its example verifies
against a C reference (and fails on a wrong result); three CPU packages (two GEMMs, a softmax) installed
with `cmake --install` link into one C and one C++ program through `find_package`, each result checked
against NumPy here, every exported symbol under its package's prefix; CUDA packages for sm_80 and sm_90a
(the wgmma GEMM and its tensor maps) render without a GPU and their launcher and example compile and link
against cuda.h; bad input (a bad --prefix too) is one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracea.emitters.export_abi import ABI_VERSION, DTYPES, default_prefix, prefix_problem
from tracea.kernels import DType

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


def build(pkg: Path, *defines: str) -> None:
    for cmd in (["cmake", "-S", str(pkg), "-B", str(pkg / "build"), *defines],
                ["cmake", "--build", str(pkg / "build"), "-j2"]):
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


def test_manifest_names_what_was_exported(tmp_path):
    pkg = export(tmp_path, *CPU_CASES["conv2d-odd"])
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["op"]["op"] == "conv2d" and m["op"]["h"] == 13 and m["backend"] == "cpu"
    assert m["variant"].endswith(".conv2d") and m["schedule"] == json.loads((pkg / "schedule.json").read_text())
    assert m["schedule_source"].startswith("heuristic") or m["schedule_source"].startswith("tuned")
    assert m["abi_version"] == ABI_VERSION and m["tracea_version"]
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
    p = m["prefix"]
    assert p == default_prefix(op, "cpu") and p.startswith("conv2d_fp32_2x3x13x11k5_")
    assert m["cmake"] == {"package": p, "target": f"{p}::{p}"} and m["tensors"]["out"] == [2, 5, 7, 6]
    h = (pkg / "include" / p / "tracea.h").read_text()
    assert f"TraceaStatus {p}_conv2d(const TraceaConstTensorView* x, const TraceaConstTensorView* weight, " \
           "const TraceaConstTensorView* bias, TraceaTensorView* out, void* stream);" in h
    assert f"#define {p.upper()}_OUT_SHAPE {{2, 5, 7, 6}}" in h and f"#define {p.upper()}_ABI_VERSION {ABI_VERSION}" in h
    assert f"namespace {p} {{" in (pkg / "include" / p / "tracea.hpp").read_text()


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


# --------------------------------------------------------------------------- packages side by side
# A program that links several packages: C and C++ sources written from their manifests, reading each
# package's inputs from DIR/<prefix>.<tensor>.bin and writing its output to DIR/<prefix>.out.<c|cpp>.bin, so
# that the test checks every result against NumPy. The memory functions are the backend's (host memory
# here; tests/test_export_gpu.py passes the CUDA driver's).

HOST_MEMORY = """static int mem_setup(void) { return 0; }
static void* mem_alloc(size_t n) { return malloc(n); }
static int mem_upload(void* d, const void* h, size_t n) { memcpy(d, h, n); return 0; }
static int mem_download(void* h, const void* d, size_t n) { memcpy(h, d, n); return 0; }
"""


def _io() -> str:
    """File reading and writing, C and C++ alike."""
    return """static void* load(const char* dir, const char* name, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    void* p = malloc(n);
    if (p && fread(p, 1, n, f) != n) { free(p); p = NULL; }
    fclose(f);
    return p;
}
static int save(const char* dir, const char* name, const void* p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = fopen(path, "wb");
    if (!f) return 1;
    int bad = fwrite(p, 1, n, f) != n;
    return fclose(f) != 0 || bad;
}
"""


def _includes(manifests: list[dict], header: str) -> str:
    return "".join(f"#include \"{m['prefix']}/{header}\"\n" for m in manifests)


def _run_one(m: dict, language: str) -> str:
    """The body that uploads one package's inputs, calls it, and writes its output (C or C++)."""
    p, kind, code = m["prefix"], m["op"]["op"], DTYPES[m["op"]["dtype"]]
    esize = DType(m["op"]["dtype"]).itemsize
    names = list(m["tensors"])
    lines = []
    for t in names:
        n = math.prod(m["tensors"][t]) * esize
        lines.append(f"    void* d_{t} = mem_alloc({n});")
        if t != "out":
            lines += [f"    void* h_{t} = load(dir, \"{p}.{t}.bin\", {n});",
                      f"    if (!h_{t} || !d_{t} || mem_upload(d_{t}, h_{t}, {n})) return fail(\"{p}: input {t}\");"]
    n_out = math.prod(m["tensors"]["out"]) * esize
    lines += [f"    void* h_out = malloc({n_out});", f"    if (!h_out || !d_out) return fail(\"{p}: out\");"]
    if language == "c":
        for t in names:
            shape = m["tensors"][t]
            maker = "tracea_view" if t == "out" else "tracea_const_view"
            kind_t = "TraceaTensorView" if t == "out" else "TraceaConstTensorView"
            lines += [f"    static const int64_t s_{t}[] = {p.upper()}_{t.upper()}_SHAPE;",
                      f"    {kind_t} v_{t} = {maker}(d_{t}, {code}, {len(shape)}, s_{t});"]
        args = ", ".join(f"&v_{t}" for t in names)
        lines += [f"    if ({p}_{kind}({args}, NULL) != TRACEA_SUCCESS) {{",
                  f"        fprintf(stderr, \"{p}_{kind}: %s\\n\", {p}_get_last_error());", "        return 1;", "    }"]
    else:
        for t in names:
            dims = ", ".join(map(str, m["tensors"][t]))
            ptr = f"d_{t}" if t == "out" else f"static_cast<const void*>(d_{t})"
            lines.append(f"    auto v_{t} = tracea::view({ptr}, {code}, {{{dims}}});")
        lines.append(f"    module.{kind}({', '.join(f'v_{t}' for t in names)});")
    tag = "c" if language == "c" else "cpp"
    lines += [f"    if (mem_download(h_out, d_out, {n_out})) return fail(\"{p}: download\");",
              f"    return save(dir, \"{p}.out.{tag}.bin\", h_out, {n_out});"]
    return "\n".join(lines)


def program_c(manifests: list[dict], memory: str = HOST_MEMORY) -> str:
    """One C program calling every package; then a bad call of the first shows each keeps its own error."""
    runs = "\n\n".join(f"static int run_{i}(const char* dir) {{\n{_run_one(m, 'c')}\n}}" for i, m in enumerate(manifests))
    first, second = manifests[0], manifests[1]
    kind, n_in = first["op"]["op"], len(first["tensors"]) - 1
    nulls = ", ".join(["NULL"] * (n_in + 2))
    calls = " || ".join(f"run_{i}(argv[1])" for i in range(len(manifests)))
    return f"""#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

{_includes(manifests, "tracea.h")}
{memory}
{_io()}
static int fail(const char* what) {{
    fprintf(stderr, "%s failed\\n", what);
    return 1;
}}

{runs}

int main(int argc, char** argv) {{
    if (argc != 2 || mem_setup()) return 2;
    if ({calls}) return 1;
    TraceaStatus st = {first["prefix"]}_{kind}({nulls});
    if (st != TRACEA_ERROR_INVALID_ARGUMENT || {first["prefix"]}_get_last_error()[0] == 0 ||
        {second["prefix"]}_get_last_error()[0] != 0) return fail("separate errors");
    printf("separate errors: %s\\n", {first["prefix"]}_get_last_error());
    return 0;
}}
"""


def program_cpp(manifests: list[dict], memory: str = HOST_MEMORY) -> str:
    """The same through each package's tracea.hpp (its own namespace and Module); a wrong shape throws."""
    runs = "\n\n".join(f"static int run_{i}(const char* dir, const {m['prefix']}::Module& module) {{\n"
                       f"{_run_one(m, 'cpp')}\n}}" for i, m in enumerate(manifests))
    modules = "\n".join(f"    {m['prefix']}::Module module_{i};" for i, m in enumerate(manifests))
    calls = " || ".join(f"run_{i}(argv[1], module_{i})" for i in range(len(manifests)))
    first = manifests[0]
    names = list(first["tensors"])
    shapes = {t: list(first["tensors"][t]) for t in names}
    shapes[names[0]][0] += 1  # a wrong shape for the first input
    code = DTYPES[first["op"]["dtype"]]
    bad = "\n".join(f"        auto w_{t} = tracea::view({'d' if t == 'out' else 'static_cast<const void*>(d)'}, "
                    f"{code}, {{{', '.join(map(str, shapes[t]))}}});" for t in names)
    return f"""#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

{_includes(manifests, "tracea.hpp")}
{memory}
{_io()}
static int fail(const char* what) {{
    std::fprintf(stderr, "%s failed\\n", what);
    return 1;
}}

{runs}

int main(int argc, char** argv) {{
    if (argc != 2 || mem_setup()) return 2;
    try {{
{modules}
        if ({calls}) return 1;
        void* d = mem_alloc(64);
{bad}
        try {{
            module_0.{first["op"]["op"]}({", ".join(f"w_{t}" for t in names)});
        }} catch (const tracea::Error& e) {{
            std::printf("tracea::Error %d: %s\\n", static_cast<int>(e.status()), e.what());
            return e.status() == TRACEA_ERROR_INVALID_ARGUMENT ? 0 : 1;
        }}
        return fail("a wrong shape did not throw; it");
    }} catch (const tracea::Error& e) {{
        std::fprintf(stderr, "tracea::Error %d: %s\\n", static_cast<int>(e.status()), e.what());
        return 1;
    }}
}}
"""


def consumer_cmake(manifests: list[dict], link_extra: str = "", head_extra: str = "",
                   folders: list[Path] | None = None) -> str:
    """A separate CMake project that finds every installed package (or adds each of ``folders``, the
    packages' own) and links them all into two programs."""
    finds = "".join(f"find_package({m['prefix']} {ABI_VERSION} REQUIRED)\n" for m in manifests)
    if folders is not None:
        finds = "".join(f"add_subdirectory({f} {m['prefix']})\n" for f, m in zip(folders, manifests, strict=True))
    targets = " ".join(m["cmake"]["target"] for m in manifests)
    return f"""cmake_minimum_required(VERSION 3.16)
project(side_by_side LANGUAGES C CXX)
set(CMAKE_C_STANDARD 11)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
{head_extra}{finds}
add_executable(side_by_side_c main.c)
add_executable(side_by_side_cpp main.cpp)
foreach(t side_by_side_c side_by_side_cpp)
  target_compile_options(${{t}} PRIVATE -Wall -Wextra -Werror)
  target_link_libraries(${{t}} PRIVATE {targets} {link_extra})
endforeach()
"""


def write_inputs(folder: Path, manifests: list[dict], seed: int = 0) -> dict[str, dict[str, object]]:
    """Random inputs in [-1, 1) in each package's storage dtype, written for the program; returned as
    float64 arrays of the stored values, by prefix and tensor."""
    import numpy as np

    from tracea.kernels.dtypes import DType, to_float64, to_storage

    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, object]] = {}
    for m in manifests:
        dtype = DType(m["op"]["dtype"])
        out[m["prefix"]] = {}
        for t, shape in m["tensors"].items():
            if t == "out":
                continue
            stored = to_storage(rng.uniform(-1, 1, shape).astype(np.float32), dtype)
            (folder / f"{m['prefix']}.{t}.bin").write_bytes(stored.tobytes())
            out[m["prefix"]][t] = to_float64(stored, dtype)
    return out


def reference(m: dict, x: dict[str, object]) -> object:
    """The op in float64 NumPy, written here from its definition (not Tracea's reference)."""
    import numpy as np

    op = m["op"]
    if op["op"] == "softmax":
        e = np.exp(x["x"] - x["x"].max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    assert op["op"] == "gemm", op
    a = x["a"] if op["layout_a"] == "row" else x["a"].T
    b = x["b"] if op["layout_b"] == "row" else x["b"].T
    v = a @ b
    for e in op["epilogue"]:
        v = {"bias": lambda v: v + x["bias"][None, :], "relu": lambda v: np.maximum(v, 0),
             "scale": lambda v: v * op["alpha"], "residual": lambda v: v + x["residual"]}[e](v)
    return v


def check_outputs(folder: Path, manifests: list[dict], inputs: dict, tag: str) -> list[str]:
    """Each package's output from the program, read back and compared with NumPy: the relative error
    within the op's tolerance (kernels.ops.tolerance), every value finite; a line per package."""
    import numpy as np

    from tracea.kernels.dtypes import DType, to_float64
    from tracea.kernels.ops import Op, tolerance

    lines = []
    for m in manifests:
        dtype = DType(m["op"]["dtype"])
        raw = np.frombuffer((folder / f"{m['prefix']}.out.{tag}.bin").read_bytes(), dtype=dtype.storage)
        out = to_float64(raw, dtype).reshape(m["tensors"]["out"])
        ref = reference(m, inputs[m["prefix"]])
        rel = float(np.linalg.norm(out - ref) / np.linalg.norm(ref))
        tol = tolerance(Op.from_json(m["op"]))
        assert np.isfinite(out).all() and rel <= tol, (m["prefix"], tag, rel, tol)
        lines.append(f"{m['prefix']} ({tag}): relative error {rel:.2e} <= {tol:.1e}")
    return lines


def defined_symbols(files: list[Path]) -> list[str]:
    """The global symbols ``files`` (objects or archives) define."""
    nm = subprocess.run(["nm", "-g", "--defined-only", *map(str, files)], capture_output=True, text=True, check=True)
    return [ln.split()[-1] for ln in nm.stdout.splitlines() if re.fullmatch(r"[0-9a-f]+ [A-Z] \S+", ln.strip())]


# two GEMMs (one op kind: the collision a shared ABI had), and a softmax under a prefix of the user's
SIDE_BY_SIDE = {
    "gemm": ["gemm", "--m", "64", "--n", "48", "--k", "32", "--backend", "cpu"],
    "gemm-odd": ["gemm", "--m", "37", "--n", "29", "--k", "19", "--layout-b", "col", "--epilogue", "bias,relu",
                 "--backend", "cpu"],
    "softmax": ["softmax", "--rows", "7", "--cols", "333", "--backend", "cpu", "--prefix", "probs"],
}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The three packages exported, built (examples off) and installed into one prefix."""
    if CMAKE is None or shutil.which("gcc") is None or shutil.which("nm") is None:
        pytest.skip("cmake, gcc or nm is missing")
    root = tmp_path_factory.mktemp("side_by_side")
    manifests = []
    for name, args in SIDE_BY_SIDE.items():
        pkg = export(root, *args, name=name)
        m = json.loads((pkg / "manifest.json").read_text())
        build(pkg, f"-D{m['prefix']}_EXAMPLES=OFF")
        r = subprocess.run(["cmake", "--install", str(pkg / "build"), "--prefix", str(root / "install")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        manifests.append(m)
    return root, manifests


def test_default_prefixes_are_distinct_identifiers(installed):
    _, manifests = installed
    prefixes = [m["prefix"] for m in manifests]
    assert len(set(prefixes)) == 3 and prefixes[2] == "probs"
    assert prefixes[0].startswith("gemm_fp32_64x48x32_") and prefixes[1].startswith("gemm_fp32_37x29x19_")
    assert all(prefix_problem(p) is None for p in prefixes)
    from tracea.kernels import Gemm

    op = Gemm(m=64, n=48, k=32)
    assert default_prefix(op, "cpu") == prefixes[0] == default_prefix(Gemm(m=64, n=48, k=32), "cpu")
    assert len({default_prefix(op, "cpu"), default_prefix(op, "cuda"),
                default_prefix(Gemm(m=64, n=48, k=32, layout_a="col"), "cpu")}) == 3  # what the size does not show


def _build_app(app: Path, cmake: str, manifests: list[dict], *defines: str) -> None:
    app.mkdir()
    (app / "CMakeLists.txt").write_text(cmake)
    (app / "main.c").write_text(program_c(manifests))
    (app / "main.cpp").write_text(program_cpp(manifests))
    cfg = subprocess.run(["cmake", "-S", str(app), "-B", str(app / "build"), *defines], capture_output=True, text=True,
                         timeout=300)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    b = subprocess.run(["cmake", "--build", str(app / "build"), "-j2"], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]


def _run_app(app: Path, data: Path, manifests: list[dict]) -> None:
    """Both programs on random inputs; each package's output against NumPy."""
    data.mkdir()
    inputs = write_inputs(data, manifests)
    for exe, tag in (("side_by_side_c", "c"), ("side_by_side_cpp", "cpp")):
        run = subprocess.run([str(app / "build" / exe), str(data)], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        check_outputs(data, manifests, inputs, tag)
        if tag == "c":  # the bad call set the first package's error and left the second's empty
            assert f"separate errors: {manifests[0]['prefix']}_gemm: a is NULL" in run.stdout, run.stdout
        else:
            assert "tracea::Error 1:" in run.stdout and f"{manifests[0]['prefix']}_gemm: a has shape" in run.stdout


@needs_cmake
def test_installed_packages_link_into_one_c_and_one_cpp_program(installed):
    """find_package of all three from a separate project; both programs' results match NumPy."""
    root, manifests = installed
    _build_app(root / "app", consumer_cmake(manifests), manifests, f"-DCMAKE_PREFIX_PATH={root / 'install'}")
    _run_app(root / "app", root / "data", manifests)


@needs_cmake
def test_package_folders_added_as_subdirectories_link_too(installed):
    """add_subdirectory of the three package folders into one tree: their targets do not clash, their
    examples stay off (they are not the top-level project), and both programs' results match NumPy."""
    root, manifests = installed
    folders = [root / name for name in SIDE_BY_SIDE]
    _build_app(root / "tree", consumer_cmake(manifests, folders=folders), manifests)
    _run_app(root / "tree", root / "tree-data", manifests)
    assert not any((root / "tree" / "build" / m["prefix"] / "example").exists() for m in manifests)


def test_every_exported_symbol_carries_its_prefix(installed):
    """nm of each installed library: only <prefix>_ names (the launcher, the ABI functions, the kernel's
    renamed entry), none shared between packages, and the ABI helpers static."""
    root, manifests = installed
    everything = []
    for m in manifests:
        p = m["prefix"]
        syms = defined_symbols([root / "install" / "lib" / f"lib{p}.a"])
        assert set(syms) == {f"{p}_{m['op']['op']}", f"{p}_abi_version", f"{p}_get_last_error", f"{p}_clear_error",
                             f"{p}_init", f"{p}_shutdown", f"{p}_kernel_entry"}, syms
        everything += syms
        assert (root / "install" / "include" / p / "tracea.hpp").is_file()
        version = (root / "install" / "lib" / "cmake" / p / f"{p}ConfigVersion.cmake").read_text()
        assert f'set(PACKAGE_VERSION "{ABI_VERSION}")' in version
    assert len(everything) == len(set(everything))


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is missing")
def test_headers_of_two_abi_versions_in_one_unit_are_an_error(installed, tmp_path):
    """The shared types are defined once per translation unit for one ABI version; another is a clear error."""
    root, manifests = installed
    src = tmp_path / "mixed.c"
    src.write_text(f"#define TRACEA_COMMON_ABI {ABI_VERSION - 1}\n#include \"{manifests[0]['prefix']}/tracea.h\"\n")
    r = subprocess.run(["gcc", "-fsyntax-only", "-I", str(root / "install" / "include"), str(src)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "two Tracea C ABI versions" in r.stderr


@pytest.mark.parametrize("bad", ["1gemm", "my-gemm", "int", "class", "_gemm", "a__b", "gemm_", "std", "tracea",
                                 "test", "x" * 49, "", "gemm kernel"])
def test_a_bad_prefix_is_one_line_and_exit_2(tmp_path, capsys, bad):
    from tracea.__main__ import main

    out = tmp_path / "pkg"
    code = main(["export", "gemm", "--m", "8", "--backend", "cpu", "--out", str(out), "--prefix", bad])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and lines and lines[0].startswith("error:") and "--prefix" in lines[0], err
    assert all(ln.startswith(("error:", "hint:")) for ln in lines) and "Traceback" not in err, err
    assert not out.exists()


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
    prefix = json.loads((full / "manifest.json").read_text())["prefix"]
    assert r.returncode == 0 and (full / "include" / prefix / "tracea.h").is_file() and (full / "mine.txt").is_file()
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
        from tracea.emitters import nvrtc as nv

        nv.find_nvrtc()
        return True
    except Exception:  # noqa: BLE001 - no NVRTC: the CUDA tests skip
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc(), reason="NVRTC (cuda-bindings) is not installed")


WGMMA_SPLIT = json.dumps({"schema_version": 1, "backend": "cuda", "core": "wgmma", "bm": 128, "bn": 128, "stages": 4,
                          "consumers": 2, "cluster": 2, "split": 2, "store": "tma"})
CUDA_CASES = {
    "gemm-bf16": ["gemm", "--m", "256", "--n", "128", "--k", "64", "--dtype", "bf16", "--arch", "sm_80"],
    "conv2d-fp16": ["conv2d", "--c", "3", "--h", "17", "--w", "19", "--k", "5", "--dtype", "fp16", "--bias", "--arch",
                    "sm_80"],
    "softmax-fp32": ["softmax", "--rows", "7", "--cols", "333", "--arch", "sm_80"],
    "softmax-split-cooperative": ["softmax", "--rows", "4", "--cols", "100000", "--arch", "sm_80"],
    "gemm-fp32-split-k-workspace": ["gemm", "--m", "64", "--k", "8192", "--arch", "sm_80"],
    # the Hopper GEMM, its three tensor maps encoded by the launcher (A column-major: MN-major boxes), a 2-block
    # cluster sharing B, split-K (its workspace and semaphores), the TMA store of C, bias and relu
    "gemm-bf16-wgmma-cluster-split": ["gemm", "--m", "512", "--n", "256", "--k", "2048", "--dtype", "bf16",
                                      "--layout-a", "col", "--epilogue", "bias,relu", "--variant", "cuda-wgmma.gemm",
                                      "--arch", "sm_90a", "--schedule", WGMMA_SPLIT],
}


@needs_nvrtc
@pytest.mark.skipif(_cuda_include() is None or shutil.which("gcc") is None or shutil.which("g++") is None,
                    reason="cuda.h or gcc/g++ is missing")
@pytest.mark.parametrize("case", list(CUDA_CASES))
def test_cuda_package_compiles_and_links(tmp_path, case):
    args = CUDA_CASES[case]
    arch = args[args.index("--arch") + 1]
    pkg = export(tmp_path, *args, "--backend", "cuda")
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["target"] == {"arch": arch} and m["backend"] == "cuda"
    name, p = m["kernel"]["name"], m["prefix"]
    assert (pkg / "kernel" / f"{name}.cubin").read_bytes()[:4] == b"\x7fELF"
    ptx = (pkg / "kernel" / f"{name}.ptx").read_text()
    assert f".target {arch}" in ptx and f".entry {m['kernel']['entry']}(" in ptx
    if args[0] == "gemm" and "bf16" in args and arch == "sm_80":
        assert m["variant"] == "cuda-mma-sync.gemm" and "mma.sync" in (pkg / "kernel" / f"{name}.cu").read_text()
    launcher = (pkg / "src" / "launcher.c").read_text()
    assert "cuLaunch" in launcher and "cuda_runtime" not in launcher and "#include <cuda.h>" in launcher
    if args[1:3] == ["--rows", "4"]:  # the split softmax: its partials and counters, all blocks resident
        assert "cuLaunchCooperativeKernel" in launcher and "#define TR_NSCRATCH 2" in launcher
    if args[3:5] == ["--k", "8192"]:  # the SIMT K split: a zeroed workspace the launcher owns
        assert "p_workspace = tr_scratch[0]" in launcher and "#define TR_NSCRATCH 1" in launcher
    if "cuda-wgmma.gemm" in args:
        _check_wgmma_launcher(m, launcher)
    inc = _cuda_include()
    objs = []
    for src in ("src/launcher.c", "src/kernel_image.c", "example.c"):
        obj = tmp_path / (Path(src).stem + ".o")
        r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", str(pkg / src), "-I",
                            str(pkg / "include"), "-I", str(pkg / "src"), "-I", str(inc), "-o", str(obj)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        objs.append(obj)
    r = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-c", str(pkg / "example.cpp"), "-I",
                        str(pkg / "include"), "-I", str(inc), "-o", str(tmp_path / "example_cpp.o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # the library's objects export the package's names only
    assert defined_symbols(objs[:2]) and all(s.startswith(f"{p}_") for s in defined_symbols(objs[:2]))
    # link against a stand-in libcuda of exactly the symbols used: every one returns CUDA_ERROR_NO_DEVICE
    nm = subprocess.run(["nm", "-u", *map(str, objs)], capture_output=True, text=True, check=True).stdout
    used = sorted({ln.split()[-1] for ln in nm.splitlines() if re.fullmatch(r"\s*U cu\w+", ln)})
    assert {"cuLaunchKernel", "cuLaunchCooperativeKernel"} & set(used) and "cuModuleLoadData" in used
    assert ("cuTensorMapEncodeTiled" in used) == ("cuda-wgmma.gemm" in args)
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
    # the launcher's whole path on a stand-in driver that answers as an sm_90 would
    if "cuda-wgmma.gemm" in args:
        _check_fake_wgmma_run(m, _run_on_fake_driver(tmp_path, pkg, m, objs[:2], inc, FAKE_CLUSTERS="3"), 3)
    else:
        _check_fake_run(m, _run_on_fake_driver(tmp_path, pkg, m, objs[:2], inc), launcher)
    if CMAKE is None:
        return
    # the package's own CMake file, its libcuda the stand-in (whichever way it finds the driver library)
    build_dir = pkg / "build"
    cfg = subprocess.run(["cmake", "-S", str(pkg), "-B", str(build_dir), f"-DCUDA_cuda_driver_LIBRARY={tmp_path}/libcuda.so",
                          f"-DTRACEA_CUDA_DRIVER={tmp_path}/libcuda.so", f"-DTRACEA_CUDA_INCLUDE={inc}",
                          f"-DCUDAToolkit_ROOT={inc.parent}"], capture_output=True, text=True, timeout=300)
    assert cfg.returncode == 0, cfg.stdout[-3000:] + cfg.stderr[-3000:]
    b = subprocess.run(["cmake", "--build", str(build_dir), "-j2"], capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    run = subprocess.run([str(build_dir / "example")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)})
    assert run.returncode == 1 and "cuInit failed" in run.stderr, run.stderr


def _check_wgmma_launcher(m: dict, launcher: str) -> None:
    """The launcher encodes the three maps with the geometry Tracea's own runs use (hopper/gemm.tma_boxes)
    and passes them first, by address, in the kernel's parameter order; split-K's buffers are its own."""
    from tracea.emitters import registry
    from tracea.emitters.cuda.hopper import splitk
    from tracea.emitters.cuda.hopper.gemm import PARAMS, tma_boxes
    from tracea.kernels.ops import Op

    assert m["variant"] == "cuda-wgmma.gemm" and m["kernel"]["entry"] == "tr_wgmma_gemm"
    op = Op.from_json(m["op"])
    boxes = tma_boxes(op, registry.backend("cuda").schedule_from_json(m["schedule"]))
    maps = m["kernel"]["tensor_maps"]["maps"]
    for which in ("a", "b"):
        g = maps[f"tm{which.upper()}"]
        assert (g["inner"], g["outer"], g["box_inner"], g["box_outer"]) == (*boxes[which]["dims"], *boxes[which]["box"])
    assert (maps["tmC"]["inner"], maps["tmC"]["outer"]) == (op.n, op.m) and m["kernel"]["tensor_maps"]["store_tma"]
    p = m["prefix"]
    for param, tensor, which in (("tmA", "a", 0), ("tmB", "b", 1), ("tmC", "out", 2)):
        g = maps[param]
        assert (f"tr_tensor_map(\"{p}_gemm\", \"{tensor}\", {which}, {tensor}->data, {g['inner']}, {g['outer']}, "
                f"{g['box_inner']}, {g['box_outer']}, &m_{param});") in launcher
    args = re.search(r"void\* args\[\] = \{(.*)\};", launcher).group(1).split(", ")
    assert [a.lstrip("&").split("_", 1)[1] for a in args] == [*PARAMS, *splitk.PARAMS]
    assert "CU_TENSOR_MAP_SWIZZLE_128B" in launcher and "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16" in launcher
    # the slices' workspace and semaphores are the library's, zeroed at load; the pairs launch whole
    assert "#define TR_NSCRATCH 2" in launcher and "#define TR_CLUSTER 2" in launcher
    assert "int s_splits = 2;" in launcher and "s_store_tma = 1;" in launcher


# A stand-in CUDA driver that answers as one sm_90 GPU would (FAKE_SMS SMs, FAKE_CLUSTERS resident clusters)
# and prints what the launcher asks of it: allocations, tensor maps (their fields stored in the map's
# opaque words), and each launch with its parameters, read by the kinds in FAKE_PARAMS (M: a tensor map
# by value, p: a pointer, f: a float, i: an int), which the test takes from the kernel's PTX signature.
FAKE_DRIVER = r"""#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int env(const char* name, int fallback) { const char* s = getenv(name); return s ? atoi(s) : fallback; }
CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext* c) { *c = (CUcontext)0x1; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice* d) { *d = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int ordinal) { *d = ordinal; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { (void)d; *c = (CUcontext)0x1; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease(CUdevice d) { (void)d; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
    (void)d;
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
       : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? env("FAKE_SMS", 132) : a == CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH;
    return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult e, const char** s) { (void)e; *s = "FAKE_ERROR"; return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult e, const char** s) { (void)e; *s = "fake"; return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
    printf("load %s\n", memcmp(image, "\x7f" "ELF", 4) == 0 ? "cubin" : "other");
    *m = (CUmodule)0x2;
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) { (void)m; return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
    (void)m;
    printf("function %s\n", name);
    *f = (CUfunction)0x3;
    return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
    (void)f;
    if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) printf("smem %d\n", v);
    return CUDA_SUCCESS;
}
static CUdeviceptr next_ptr = 0x7000000;
CUresult cuMemAlloc(CUdeviceptr* p, size_t n) {
    *p = next_ptr;
    next_ptr += (n + 511) / 256 * 256;
    printf("alloc %llu %zu\n", (unsigned long long)*p, n);
    return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr p) { (void)p; return CUDA_SUCCESS; }
CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n) {
    printf("memset %llu %u %zu\n", (unsigned long long)p, (unsigned)v, n);
    return CUDA_SUCCESS;
}
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
    (void)a; (void)p;
    *(unsigned int*)data = CU_MEMORYTYPE_DEVICE;
    return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction f, int block, size_t smem) {
    (void)f; (void)block; (void)smem;
    *n = 8;
    return CUDA_SUCCESS;
}
#if CUDA_VERSION >= 12000
CUresult cuOccupancyMaxActiveClusters(int* n, CUfunction f, const CUlaunchConfig* c) {
    (void)f;
    printf("clusters of %u, %u threads, %u smem\n", c->attrs[0].value.clusterDim.x, c->blockDimX, c->sharedMemBytes);
    *n = env("FAKE_CLUSTERS", 0);
    return *n ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuTensorMapEncodeTiled(CUtensorMap* m, CUtensorMapDataType t, cuuint32_t rank, void* addr, const cuuint64_t* dims,
                                const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t* steps,
                                CUtensorMapInterleave il, CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                CUtensorMapFloatOOBfill oob) {
    const char* type = t == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ? "bf16" : t == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 ? "fp16" : "?";
    int ok = rank == 2 && steps[0] == 1 && steps[1] == 1 && il == CU_TENSOR_MAP_INTERLEAVE_NONE &&
             sw == CU_TENSOR_MAP_SWIZZLE_128B && oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE &&
             l2 == CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    memset(m, 0, sizeof *m);
    cuuint64_t f[8] = {(cuuint64_t)(uintptr_t)addr, dims[0], dims[1], strides[0], box[0], box[1], (cuuint64_t)ok, 0x7ace};
    memcpy(m->opaque, f, sizeof f);
    printf("encode %s %llu\n", type, (unsigned long long)(uintptr_t)addr);
    return CUDA_SUCCESS;
}
#endif
static CUresult launch(const char* how, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned smem, CUstream s, void** params) {
    printf("%s grid %u %u %u block %u %u %u smem %u stream %llu params", how, gx, gy, gz, bx, by, bz, smem,
           (unsigned long long)(uintptr_t)s);
    const char* kinds = getenv("FAKE_PARAMS");
    for (int i = 0; kinds && kinds[i]; ++i) {
        if (kinds[i] == 'M') {
            const uint64_t* w = (const uint64_t*)params[i];
            printf(" map:%llu:%llu:%llu:%llu:%llu:%llu:%llu:%llx", (unsigned long long)w[0], (unsigned long long)w[1],
                   (unsigned long long)w[2], (unsigned long long)w[3], (unsigned long long)w[4], (unsigned long long)w[5],
                   (unsigned long long)w[6], (unsigned long long)w[7]);
        } else if (kinds[i] == 'p') printf(" %llu", *(const unsigned long long*)params[i]);
        else if (kinds[i] == 'f') printf(" %g", (double)*(const float*)params[i]);
        else printf(" %d", *(const int*)params[i]);
    }
    printf("\n");
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void** params, void** extra) {
    (void)f; (void)extra;
    return launch("launch", gx, gy, gz, bx, by, bz, smem, s, params);
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned smem, CUstream s, void** params) {
    (void)f;
    return launch("cooperative", gx, gy, gz, bx, by, bz, smem, s, params);
}
"""

PTX_KINDS = {".u64": "p", ".f32": "f", ".u32": "i", ".s32": "i"}


def _param_kinds(ptx: str, entry: str) -> str:
    """The kernel's parameters from its PTX signature: M (128 opaque bytes, a tensor map), p, f or i."""
    sig = re.search(rf"\.entry {entry}\((.*?)\)", ptx, re.S).group(1)
    kinds = []
    for decl in sig.split(","):
        if ".b8" in decl:
            assert "[128]" in decl, decl
            kinds.append("M")
        else:
            kinds.append(next(k for t, k in PTX_KINDS.items() if t in decl))
    return "".join(kinds)


def _run_on_fake_driver(tmp_path: Path, pkg: Path, m: dict, library: list[Path], inc: Path, **env: str) -> str:
    """A program that calls the package's launcher three times over fixed device addresses (then once more
    with C's address 8 bytes off, and once with A's), run on the stand-in driver; its output."""
    p, kind, code = m["prefix"], m["op"]["op"], DTYPES[m["op"]["dtype"]]
    names = list(m["tensors"])
    views = "\n".join(
        f"    static const int64_t s_{t}[] = {p.upper()}_{t.upper()}_SHAPE;\n"
        f"    {'TraceaTensorView' if t == 'out' else 'TraceaConstTensorView'} v_{t} = "
        f"{'tracea_view' if t == 'out' else 'tracea_const_view'}((void*)(uintptr_t){(i + 1) << 28}ull, {code}, "
        f"{len(m['tensors'][t])}, s_{t});" for i, t in enumerate(names))
    call = f"{p}_{kind}({', '.join(f'&v_{t}' for t in names)}, (void*)0x77)"
    (tmp_path / "fake_main.c").write_text(f"""#include <stdint.h>
#include <stdio.h>
#include "{p}/tracea.h"
int main(void) {{
{views}
    for (int i = 0; i < 5; ++i) {{
        if (i == 3) v_out.data = (char*)v_out.data + 8;
        if (i == 4) v_{names[0]}.data = (const char*)v_{names[0]}.data + 8;
        printf("call %d\\n", i);
        TraceaStatus s = {call};
        printf("status %d %s\\n", (int)s, {p}_get_last_error());
    }}
    {p}_shutdown();
    return 0;
}}
""")
    (tmp_path / "fake_cuda.c").write_text(FAKE_DRIVER)
    fake = tmp_path / "fake"
    fake.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-I", str(inc), str(tmp_path / "fake_cuda.c"),
                    "-o", str(fake / "libcuda.so")], check=True, capture_output=True, text=True)
    exe = tmp_path / "fake_main"
    r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", str(tmp_path / "fake_main.c"), *map(str, library),
                        "-I", str(pkg / "include"), "-L", str(fake), "-lcuda", "-pthread", "-o", str(exe)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ptx = (pkg / "kernel" / f"{m['kernel']['name']}.ptx").read_text()
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LD_LIBRARY_PATH": str(fake),
                              "FAKE_PARAMS": _param_kinds(ptx, m["kernel"]["entry"]), **env})
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _check_fake_run(m: dict, out: str, launcher: str) -> None:
    """A kernel without tensor maps: loaded once, its scratch allocated and zeroed once, each call launched
    with the export's grid, block and shared memory on the caller's stream, every view's address passed."""
    lines = out.splitlines()
    assert lines[1:3] == ["load cubin", f"function {m['kernel']['entry']}"], lines[:3]
    allocs = [ln.split()[1:] for ln in lines if ln.startswith("alloc ")]
    assert len(allocs) == int(re.search(r"#define TR_NSCRATCH (\d+)", launcher).group(1))
    assert sorted(ln.split()[1:] for ln in lines if ln.startswith("memset ")) == sorted([a, "0", n] for a, n in allocs)
    calls = out.split("call ")[1:]
    how = "cooperative" if "cuLaunchCooperativeKernel(" in launcher else "launch"
    (gx, gy, gz), (bx, by, bz) = m["kernel"]["grid"], m["kernel"]["block"]
    for i, call in enumerate(calls):
        assert "status 0" in call, call
        head, params = next(ln for ln in call.splitlines() if ln.startswith(how)).split(" params ")
        assert head == f"{how} grid {gx} {gy} {gz} block {bx} {by} {bz} smem {m['kernel']['smem_bytes']} stream 119"
        moved = {3: "out", 4: next(iter(m["tensors"]))}.get(i)  # the view whose address the call moved by 8
        want = [((k + 1) << 28) + (8 if t == moved or (i == 4 and t == "out") else 0)
                for k, t in enumerate(m["tensors"])]
        assert set(map(str, want)) <= set(params.split()), (want, params)


def _check_fake_wgmma_run(m: dict, out: str, clusters: int) -> None:
    """What the stand-in driver saw: the scratch allocated and zeroed once, the maps encoded once per
    address with Tracea's geometry and passed by value, the grid sized by the resident clusters, and every
    pointer and scalar where the kernel's signature has it."""
    from tracea.emitters import registry
    from tracea.emitters.cuda.hopper.gemm import launch_geometry, split_plan, tma_boxes
    from tracea.kernels.ops import Op

    op = Op.from_json(m["op"])
    sched = registry.backend("cuda").schedule_from_json(m["schedule"])
    plan = split_plan(op, sched, 132)
    ws, sem = max(16, plan.ws_bytes), max(4, 4 * plan.sem_count)
    lines = out.splitlines()
    allocs = [ln.split() for ln in lines if ln.startswith("alloc ")]
    assert [int(a[2]) for a in allocs] == [ws, sem]
    assert sorted(ln.split()[1:] for ln in lines if ln.startswith("memset ")) == sorted([a[1], "0", a[2]] for a in allocs)
    assert lines[1:3] == ["load cubin", "function tr_wgmma_gemm"] and f"smem {sched.smem_bytes}" in lines
    assert f"clusters of {sched.cluster}, {sched.threads} threads, {sched.smem_bytes} smem" in lines
    calls = out.split("call ")[1:]
    assert all("status 0" in c for c in calls[:4]) and "status 1" in calls[4] and "not 16-byte aligned" in calls[4]
    a, b, bias, c = (1 << 28, 2 << 28, 3 << 28, 4 << 28)
    encoded = [[ln.split()[2] for ln in call.splitlines() if ln.startswith("encode ")] for call in calls]
    assert encoded == [[str(a), str(b), str(c)], [], [], [], []]  # once per address: the second call encodes nothing
    assert all(f"encode {op.dtype.value} " in call for call in calls[:1])
    boxes = tma_boxes(op, sched)
    grid = launch_geometry(op, sched, 132, clusters)[0]  # as tma.WgmmaKernel sizes it from the driver's count
    assert grid < m["kernel"]["grid"][0]  # fewer than the export's grid: the clamp at load is what is tested
    for i, call in enumerate(calls[:4]):
        launch = next(ln for ln in call.splitlines() if ln.startswith("launch "))
        head, params = launch.split(" params ")
        assert head == f"launch grid {grid} 1 1 block {sched.threads} 1 1 smem {sched.smem_bytes} stream 119", head
        words = params.split()
        maps = [w.split(":")[1:] for w in words[:3]]
        for (which, ptr), got in zip((("a", a), ("b", b)), maps, strict=False):
            inner, outer = boxes[which]["dims"]
            assert got == [str(v) for v in (ptr, inner, outer, inner * 2, *boxes[which]["box"], 1)] + ["7ace"], got
        c_ptr = c + (8 if i == 3 else 0)
        if i < 3:  # C's map, for the TMA store; zeros (and store_tma 0) once C's address is 8 bytes off
            assert maps[2] == [str(v) for v in (c, op.n, op.m, op.n * 2, 64, 64, 1)] + ["7ace"], maps[2]
        else:
            assert maps[2] == ["0"] * 7 + ["0"], maps[2]
        assert words[3:] == [str(c_ptr), str(bias), "0", "1", str(op.m), str(op.n), str(op.k), str(int(i < 3)),
                             allocs[0][1], allocs[1][1], str(plan.splits), str(plan.dp_tiles)], words[3:]


@needs_nvrtc
def test_hopper_kernels_the_launcher_cannot_feed_are_refused_with_a_hint(tmp_path):
    """The GEMM's rows must be TMA-addressable (16-byte multiples); the Hopper conv's maps (im2col) are
    not encoded by exported launchers."""
    r = tracea("export", "gemm", "--m", "256", "--n", "128", "--k", "100", "--dtype", "bf16", "--backend", "cuda",
               "--arch", "sm_90a", "--variant", "cuda-wgmma.gemm", "--out", str(tmp_path / "a"))
    _one_line_exit(r, 3, "TMA needs a multiple of 16 B")
    assert "--variant cuda-mma-sync.gemm" in r.stderr
    r = tracea("export", "conv2d", "--c", "64", "--h", "14", "--w", "14", "--k", "64", "--dtype", "fp16",
               "--layout", "nhwc", "--backend", "cuda", "--arch", "sm_90a", "--variant", "cuda-wgmma.conv2d",
               "--out", str(tmp_path / "b"))
    _one_line_exit(r, 3, "tensor maps that exported launchers encode for the GEMM only")
    assert "--variant cuda-mma-sync.conv2d" in r.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


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
