"""A program that links several exported packages (tests/export/test_export_side_by_side.py, and
tests/export/test_export_gpu.py on a GPU): C and C++ sources written from the packages' manifests, reading each
package's inputs from DIR/<prefix>.<tensor>.bin and writing its output to DIR/<prefix>.out.<c|cpp>.bin; the
CMake project that finds or adds the packages; the inputs, and each output checked against NumPy. The memory
functions are the backend's (host memory here; tests/export/test_export_gpu.py passes the CUDA driver's)."""

from __future__ import annotations

import math
from pathlib import Path

from tracea.emitters.export_abi import ABI_VERSION, DTYPES
from tracea.kernels import DType

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

    from tracea.kernels import Op, tolerance
    from tracea.kernels.dtypes import DType, to_float64

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
