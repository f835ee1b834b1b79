"""``tracea export ... --backend cpu``: the rendered C kernel, the C ABI around it (export_abi.py), a CMake
file that builds a static library (and installs it with a CMake package), and an example registered with
CTest.

The rendered source is copied byte for byte (its sha256 is the rendering's); ``src/kernel.c`` includes it
with its entry renamed ``<prefix>_kernel_entry``, the only symbol the kernel's object exports (the
renderers keep every other function static), so packages link side by side.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

from tracea.doctor.errors import UnsupportedError
from tracea.doctor.variants import Variant

from ..export_abi import DTYPE_CODES, Launcher, check_prefix, checks_c, default_prefix, launcher_for
from ..export_cmake import cmake_examples, cmake_head, cmake_package, config_in
from ..export_example import example_c
from ..export_package import manifest, package_files, prepare_out, readme, write_package
from .build import _render_checked
from .render import Rendered

DEVICE_C = """/* The CPU backend: tensors live in host memory. */
static int ex_setup(void) { return 0; }
static void* ex_alloc(size_t n) { return malloc(n); }
static int ex_upload(void* dst, const void* src, size_t n) { memcpy(dst, src, n); return 0; }
static int ex_download(void* dst, const void* src, size_t n) { memcpy(dst, src, n); return 0; }
static int ex_sync(void) { return 0; }
static void ex_free(void* p) { free(p); }
static void ex_teardown(void) {}
"""


# Buffers a kernel writes beside ``out`` that the ABI does not return (attention's lse and block count):
# the launcher allocates them for each call, so concurrent calls share nothing.
SCRATCH = {"lse": lambda op: 4 * _count(op.lse_shape()), "stats": lambda op: 8}


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _entry(launcher: Launcher) -> str:
    return launcher.api("kernel_entry")


def _launcher_c(launcher: Launcher, r: Rendered) -> str:
    names = {t.name for t in launcher.tensors}
    scratch = {b: SCRATCH[b](launcher.op) for b in r.buffers if b in SCRATCH and b not in names}
    bufs = ", ".join(f"(void*){b}->data" if b in names else f"scratch_{b}" if b in scratch else "NULL"
                     for b in r.buffers)
    take = "".join(f"    void* scratch_{b} = calloc(1, {n});\n" for b, n in scratch.items())
    if scratch:
        take += (f"    if ({' || '.join(f'!scratch_{b}' for b in scratch)}) {{\n"
                 f"        {' '.join(f'free(scratch_{b});' for b in scratch)}\n"
                 f"        return tr_fail(TRACEA_ERROR_CPU, \"{launcher.name}: out of memory for its scratch\");\n    }}\n")
    give = "".join(f"    free(scratch_{b});\n" for b in scratch)
    fparams = ", ".join(repr(float(f)) for f in r.fparams) or "0.0"
    return f"""/* launcher.c: {launcher.name} on the CPU kernel {r.name} (generated, do not edit). Everything here
 * but the package's own {launcher.prefix}_ functions is static. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include "tracea_abi.inc"

static pthread_mutex_t tr_lock = PTHREAD_MUTEX_INITIALIZER;

int {_entry(launcher)}(void* const* bufs, const int64_t* dims, const double* fparams);

TraceaStatus {launcher.api("init")}(void) {{ return TRACEA_SUCCESS; }}
void {launcher.api("shutdown")}(void) {{}}

{launcher.signature()} {{
{checks_c(launcher)}
    (void)stream;  /* the CPU kernel returns when the result is written */
{take}    void* bufs[] = {{{bufs}}};  /* the kernel only reads its inputs */
    static const int64_t dims[] = {{{", ".join(map(str, r.dims))}}};  /* threads last: 0 = the schedule's */
    static const double fparams[] = {{{fparams}}};
    pthread_mutex_lock(&tr_lock);  /* the kernel keeps its packing buffers and thread pool between calls */
    int rc = {_entry(launcher)}(bufs, dims, fparams);
    pthread_mutex_unlock(&tr_lock);
{give}    if (rc != 0) return tr_fail(TRACEA_ERROR_CPU, "{launcher.name}: the kernel could not allocate its packing buffers "
                                "(code %d)", rc);
    return TRACEA_SUCCESS;
}}
"""


def _cmake(launcher: Launcher, r: Rendered) -> str:
    flags = ";".join(["-O3", *r.flags])
    p = launcher.prefix
    head = cmake_head(launcher, f"Builds the exported Tracea kernel ({r.name}) as a static library, its examples and CTest checks.", "3.16")
    return f"""{head}set(CMAKE_C_STANDARD 11)
set(CMAKE_C_EXTENSIONS ON)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
find_package(Threads REQUIRED)

add_library({p} STATIC src/launcher.c src/kernel.c)
add_library({p}::{p} ALIAS {p})
target_include_directories({p} PUBLIC $<BUILD_INTERFACE:${{CMAKE_CURRENT_SOURCE_DIR}}/include>
                           $<INSTALL_INTERFACE:${{CMAKE_INSTALL_INCLUDEDIR}}> PRIVATE src)
# the kernel's own flags: its instruction set ({r.flags and ' '.join(r.flags) or 'portable C'}), as Tracea compiles it
set_source_files_properties(src/kernel.c PROPERTIES COMPILE_OPTIONS "{flags}")
set_target_properties({p} PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_link_libraries({p} PUBLIC Threads::Threads m)
{cmake_examples(launcher)}
{cmake_package(launcher)}"""


def example_cpp(launcher: Launcher) -> str:
    """The C++ wrapper in use: a Module, and a wrong view turned into a ``tracea::Error``."""
    first = launcher.tensors[0]
    views = "\n".join(f"    std::vector<{DTYPE_CODES[t.dtype][2]}> h_{t.name}({t.numel});\n"
                      f"    static const int64_t s_{t.name}[] = {launcher.shape_macro(t)}_SHAPE;\n"
                      f"    {t.view_type} {t.name} = {t.view_maker}(h_{t.name}.data(), {t.code}, {len(t.shape)}, "
                      f"s_{t.name});" for t in launcher.tensors)
    args = ", ".join(t.name for t in launcher.tensors)
    return f"""// example.cpp: tracea.hpp in use (RAII module, exceptions). Generated by `tracea export`.
#include <cstdio>
#include <vector>

#include "{launcher.prefix}/tracea.hpp"

int main() {{
    {launcher.prefix}::Module module;  // checks the ABI version
{views}
    module.{launcher.op.kind}({args});  // zero inputs: runs, and must not throw
    {first.name}.shape[0] += 1;
    try {{
        module.{launcher.op.kind}({args});
    }} catch (const {launcher.prefix}::Error& e) {{
        std::printf("tracea::Error (status %d): %s\\n", static_cast<int>(e.status()), e.what());
        return e.status() == TRACEA_ERROR_INVALID_ARGUMENT ? 0 : 1;
    }}
    std::printf("a wrong shape did not throw\\n");
    return 1;
}}
"""


def export(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None,
           force: bool = False, schedule_source: str = "given", prefix: str | None = None) -> list[Path]:
    """The package (``Backend.export``) under ``prefix`` (default: ``export_abi.default_prefix``)."""
    if arch is not None:
        raise UnsupportedError(f"the CPU backend builds for this machine only, not {arch}")
    prefix = check_prefix(prefix) if prefix is not None else default_prefix(op, "cpu")
    v, r = _render_checked(op, variant, schedule, host)
    launcher = launcher_for(op, r.buffers, prefix)
    from tracea.kernels import tolerance

    out = Path(out_dir)
    prepare_out(out, force)
    files: dict[str, str | bytes] = {
        **package_files(launcher, "cpu"),
        f"src/{r.name}.c": r.source,
        "src/kernel.c": f"/* The rendered kernel, its entry renamed for the launcher. */\n#define {r.entry} "
                        f"{_entry(launcher)}\n#include \"{r.name}.c\"\n",
        "src/launcher.c": _launcher_c(launcher, r),
        "example.c": example_c(launcher, tolerance(op), DEVICE_C),
        "example.cpp": example_cpp(launcher),
        "CMakeLists.txt": _cmake(launcher, r),
        f"cmake/{prefix}Config.cmake.in": config_in(launcher),
        "schedule.json": json.dumps(schedule.to_json(), indent=2) + "\n",
    }
    files["README.md"] = readme(
        launcher, "CPU", r.name, v.id, schedule_source, f"{platform.machine()} {v.family}",
        f"The kernel (`src/{r.name}.c`, as Tracea rendered it) is compiled with "
        f"`{' '.join(['-O3', *r.flags])}` (GCC/Clang syntax): it runs on CPUs with that instruction set. "
        f"`src/kernel.c` includes it with its entry renamed `{_entry(launcher)}`.")
    target = {"machine": platform.machine(), "family": v.family, "flags": list(r.flags)}
    kernel = {"name": r.name, "entry": r.entry, "source": f"src/{r.name}.c", "source_sha256": _sha(r.source)}
    files["manifest.json"] = manifest(launcher, "cpu", v.id, schedule.to_json(), schedule_source, target, kernel,
                                      files)
    return write_package(out, files)


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
