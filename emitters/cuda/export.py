"""``tracea export ... --backend cuda``: the package of one CUDA kernel, put together here: the kernel's
cubin and PTX (embedded in the library by ``src/kernel_image.c`` and shipped beside it), the launcher
(export_launcher.py: only the CUDA driver API, cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel), the
C ABI (export_abi.py, export_headers.py), a CMake file (CUDA::cuda_driver, install and package config), a
verifying example on the device and the C++ one, and the manifest (export_package.py).

The Hopper GEMM (``cuda-wgmma.gemm``) takes its operands as TMA tensor maps passed by value: the launcher
encodes them itself (export_maps.py: cuTensorMapEncodeTiled, the geometry of ``hopper/gemm.tma_boxes`` as
``tma.py`` encodes it for Tracea's own runs) and keeps the maps of the last few addresses of each operand.
A shape whose rows TMA cannot address (``tma_unsupported``) and the other TMA kernels (the Hopper conv and
attention) are refused with a hint (``--variant cuda-mma-sync.*``: the mma.sync kernels run on Hopper too).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tracea.doctor.errors import UnsupportedError
from tracea.doctor.variants import Variant

from ..export_abi import Launcher, check_prefix, default_prefix, launcher_for
from ..export_cmake import cmake_examples, cmake_head, cmake_package, config_in
from ..export_example import example_c
from ..export_package import manifest, package_files, prepare_out, readme, write_package
from .export_launcher import launcher_c, runtime_names, scratch_bytes
from .export_maps import MAP_OPERANDS, TensorMaps, tensor_maps
from .hopper.splitk import spread_blocks
from .render import Rendered

DEVICE_C = """/* The CUDA backend: tensors live in device memory (the primary context of device 0). */
#include <cuda.h>
static CUdevice ex_dev;
static int ex_cu(CUresult rc, const char* what) {
    if (rc == CUDA_SUCCESS) return 0;
    const char* name = NULL;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "example: %s failed: %s\\n", what, name ? name : "unknown CUDA error");
    return 1;
}
static int ex_setup(void) {
    CUcontext ctx;
    if (ex_cu(cuInit(0), "cuInit") || ex_cu(cuDeviceGet(&ex_dev, 0), "cuDeviceGet")) return 1;
    if (ex_cu(cuDevicePrimaryCtxRetain(&ctx, ex_dev), "cuDevicePrimaryCtxRetain")) return 1;
    return ex_cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}
static void* ex_alloc(size_t n) {
    CUdeviceptr p = 0;
    return ex_cu(cuMemAlloc(&p, n), "cuMemAlloc") ? NULL : (void*)(uintptr_t)p;
}
static int ex_upload(void* dst, const void* src, size_t n) {
    return ex_cu(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, n), "cuMemcpyHtoD");
}
static int ex_download(void* dst, const void* src, size_t n) {
    return ex_cu(cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, n), "cuMemcpyDtoH");
}
static int ex_sync(void) { return ex_cu(cuCtxSynchronize(), "cuCtxSynchronize"); }
static void ex_free(void* p) { cuMemFree((CUdeviceptr)(uintptr_t)p); }
static void ex_teardown(void) { cuDevicePrimaryCtxRelease(ex_dev); }
"""


def _image_c(launcher: Launcher, cubin: bytes, ptx: str) -> str:
    rows = [", ".join(str(b) for b in cubin[i:i + 24]) for i in range(0, len(cubin), 24)]
    text = ptx.encode()
    prow = [", ".join(str(b) for b in text[i:i + 24]) for i in range(0, len(text), 24)]
    p = launcher.prefix
    return ("/* kernel_image.c: the kernel's cubin and PTX (generated from kernel/, do not edit). */\n"
            f"const unsigned char {p}_cubin[{len(cubin)}] = {{\n" + ",\n".join(rows) + "\n};\n"
            f"const char {p}_ptx[{len(text) + 1}] = {{\n" + ",\n".join([*prow, "0"]) + "\n};\n")


def _cmake(launcher: Launcher, r: Rendered) -> str:
    p = launcher.prefix
    head = cmake_head(launcher, f"Builds the exported Tracea kernel ({r.name}) with its driver-API launcher, the examples and CTest checks.", "3.18")
    return f"""{head}set(CMAKE_C_STANDARD 11)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)

add_library({p} STATIC src/launcher.c src/kernel_image.c)
add_library({p}::{p} ALIAS {p})
target_include_directories({p} PUBLIC $<BUILD_INTERFACE:${{CMAKE_CURRENT_SOURCE_DIR}}/include>
                           $<INSTALL_INTERFACE:${{CMAKE_INSTALL_INCLUDEDIR}}> PRIVATE src)
# only the driver API (libcuda and cuda.h): the toolkit's CUDA::cuda_driver, else cuda.h and libcuda found directly
find_package(CUDAToolkit QUIET)
if(TARGET CUDA::cuda_driver)
  target_link_libraries({p} PUBLIC CUDA::cuda_driver)
  set({p}_DEPENDENCIES "find_dependency(CUDAToolkit)")
else()
  find_path(TRACEA_CUDA_INCLUDE cuda.h HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES include REQUIRED)
  find_library(TRACEA_CUDA_DRIVER cuda HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda
               PATH_SUFFIXES lib64 lib lib64/stubs lib/stubs REQUIRED)
  target_include_directories({p} PUBLIC ${{TRACEA_CUDA_INCLUDE}})
  target_link_libraries({p} PUBLIC ${{TRACEA_CUDA_DRIVER}})
  set({p}_DEPENDENCIES "")
endif()
find_package(Threads REQUIRED)
target_link_libraries({p} PUBLIC Threads::Threads)
{cmake_examples(launcher, " m")}
{cmake_package(launcher)}"""


def _ptx(source: str, name: str, arch: str) -> str:
    """The kernel's PTX (NVRTC through cuda-bindings, no driver needed; Tracea's language options): what the
    driver compiles for a GPU newer than the cubin's."""
    from cuda.bindings import nvrtc

    from tracea.doctor.errors import CompileError

    def ok(result: Any, what: str) -> Any:
        err, *rest = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC {what} failed on {name} for {arch}: {err}", "emit the kernel to see its source")
        return rest[0] if len(rest) == 1 else rest

    prog = ok(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []), "create")
    try:
        opts = [b"-std=c++17", f"-arch=compute_{arch.removeprefix('sm_')}".encode()]
        ok(nvrtc.nvrtcCompileProgram(prog, len(opts), opts), "compile")
        size = ok(nvrtc.nvrtcGetPTXSize(prog), "PTX size")
        buf = b" " * size
        ok(nvrtc.nvrtcGetPTX(prog, buf), "PTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return buf.rstrip(b"\x00").decode()


def _refuse_unknown(op: Any, r: Rendered, variant: Variant, scalars: dict[str, Any], maps: TensorMaps | None) -> None:
    """Every kernel parameter must be an op tensor, a known scratch buffer, a scalar or (the Hopper GEMM) a
    tensor map the launcher encodes; the other TMA kernels' maps are not."""
    known = {*op.shapes(), *runtime_names()[0], "workspace", *scratch_bytes(op, r), *scalars,
             *((*MAP_OPERANDS, "store_tma") if maps is not None else ())}
    unknown = [p for p in r.params if p not in known]
    if unknown and all(p.startswith("tm") or p == "store_tma" for p in unknown):  # TMA alone: mma.sync takes none
        raise UnsupportedError(
            f"export: {variant.id} ({r.name}) takes {', '.join(unknown)}: Hopper TMA tensor maps that exported "
            "launchers encode for the GEMM only (cuTensorMapEncodeTiled)",
            f"pass --variant cuda-mma-sync.{variant.op} (mma.sync, which Hopper runs too)")
    if unknown:
        raise UnsupportedError(f"export: {variant.id} ({r.name}) takes {', '.join(unknown)}, which exported "
                               "launchers do not provide yet", "pass another --variant or --schedule")
    plan = r.metadata.get("split_k") or {}
    if (need := spread_blocks(plan, r.metadata)) > r.grid[0]:
        raise UnsupportedError(f"export: the split-K spread fix-up needs all {plan['splits']} slices of a tile "
                               f"resident ({need} blocks), but the grid holds {r.grid[0]}",
                               "a schedule with split_fix 'last'")


def export(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None,
           force: bool = False, schedule_source: str = "given", prefix: str | None = None) -> list[Path]:
    """The package (``Backend.export``) under ``prefix`` (default: ``export_abi.default_prefix``)."""
    from tracea.kernels import tolerance

    from .build import compile_kernel

    prefix = check_prefix(prefix) if prefix is not None else default_prefix(op, "cuda")
    v, r, scalars, artifact = compile_kernel(op, variant, schedule, host, arch)
    maps = tensor_maps(op, r, schedule)
    plan = r.metadata.get("split_k")
    if plan is not None and "dp_tiles" in r.params:  # the Hopper split-K's slicing, as tma.split_args passes it
        scalars = {**scalars, "splits": plan["splits"], "dp_tiles": plan["dp_tiles"]}
    _refuse_unknown(op, r, v, scalars, maps)
    # the C function's views in the op's order (A, B, ...), whichever tensor each of the kernel's maps is over
    order = [MAP_OPERANDS[p][0] if maps is not None and p in MAP_OPERANDS else p for p in r.params]
    # the runtime's buffers and the op's own tensors beside them (an FP8 C's scale_out and amax); kernels whose other
    # parameters no launcher provides were refused above (_refuse_unknown)
    launcher = launcher_for(op, list(dict.fromkeys(p for p in order if p in runtime_names()[0] or p in op.shapes())), prefix)
    target = artifact.metadata["arch"]
    cubin = Path(artifact.binary).read_bytes()
    ptx = _ptx(r.source, r.name, target)
    out = Path(out_dir)
    prepare_out(out, force)
    files: dict[str, str | bytes] = {
        **package_files(launcher, "cuda"),
        "src/launcher.c": launcher_c(launcher, r, scalars, target, maps),
        "src/kernel_image.c": _image_c(launcher, cubin, ptx),
        f"kernel/{r.name}.cu": r.source,
        f"kernel/{r.name}.cubin": cubin,
        f"kernel/{r.name}.ptx": ptx,
        "example.c": example_c(launcher, tolerance(op), DEVICE_C),
        "example.cpp": example_cpp(launcher),
        "CMakeLists.txt": _cmake(launcher, r),
        f"cmake/{prefix}Config.cmake.in": config_in(launcher, f"@{prefix}_DEPENDENCIES@\n"),
        "schedule.json": json.dumps(schedule.to_json(), indent=2) + "\n",
    }
    notes = (f"The kernel (`kernel/{r.name}.cu`, compiled by NVRTC for {target}) is embedded in `src/kernel_image.c` "
             "as its cubin and PTX; the launcher uses only the CUDA driver API (link CUDA::cuda_driver). It loads the "
             f"module into the context current on the calling thread at `{launcher.api('init')}()` (device 0's primary "
             "context if none) and launches on the given stream; views hold device pointers. On a GPU newer than the "
             "cubin's the driver compiles the PTX.")
    if scratch_bytes(op, r):
        notes += (" The kernel's scratch buffers (" + ", ".join(scratch_bytes(op, r)) + ") belong to the library: one "
                  "launch in flight at a time.")
    if maps is not None:
        notes += (" The launcher encodes the kernel's TMA tensor maps (cuTensorMapEncodeTiled) from the views' "
                  "addresses and keeps those of the last 8 addresses of each operand; A and B must be 16-byte aligned.")
    files["README.md"] = readme(launcher, "CUDA", r.name, v.id, schedule_source, target, notes)
    res = artifact.metadata.get("resources", {})
    kernel = {"name": r.name, "entry": r.entry, "source": f"kernel/{r.name}.cu",
              "source_sha256": hashlib.sha256(r.source.encode()).hexdigest(), "grid": list(r.grid),
              "block": list(r.block), "smem_bytes": r.smem, "regs_per_thread": res.get("regs_per_thread"),
              "spills": res.get("spills"), "compiler": artifact.compiler, "compiler_version": artifact.compiler_version,
              **({"tensor_maps": maps.to_json()} if maps is not None else {})}
    files["manifest.json"] = manifest(launcher, "cuda", v.id, schedule.to_json(), schedule_source,
                                      {"arch": target}, kernel, files)
    return write_package(out, files)


def example_cpp(launcher: Launcher) -> str:
    """tracea.hpp in use on the GPU: a Module, and a wrong view turned into a ``tracea::Error``."""
    first = launcher.tensors[0]
    views = "\n".join(
        f"        static const int64_t s_{t.name}[] = {launcher.shape_macro(t)}_SHAPE;\n"
        f"        {t.view_type} {t.name} = {t.view_maker}(&dummy, {t.code}, {len(t.shape)}, s_{t.name});"
        for t in launcher.tensors)
    args = ", ".join(t.name for t in launcher.tensors)
    ns = launcher.prefix
    return f"""// example.cpp: tracea.hpp in use (RAII module, exceptions). Generated by `tracea export`.
#include <cstdio>

#include "{ns}/tracea.hpp"

int main() {{
    try {{
        {ns}::Module module;  // checks the ABI version, loads the kernel
        int dummy = 0;
{views}
        {first.name}.shape[0] += 1;
        try {{
            module.{launcher.op.kind}({args});
        }} catch (const {ns}::Error& e) {{
            std::printf("tracea::Error (status %d): %s\\n", static_cast<int>(e.status()), e.what());
            return e.status() == TRACEA_ERROR_INVALID_ARGUMENT ? 0 : 1;
        }}
        std::printf("a wrong shape did not throw\\n");
    }} catch (const {ns}::Error& e) {{
        std::printf("{ns}::Module: %s\\n", e.what());
    }}
    return 1;
}}
"""
