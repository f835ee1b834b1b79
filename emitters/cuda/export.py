"""``tracea export ... --backend cuda``: the kernel's cubin and PTX (embedded in the library and shipped
beside it), a launcher that needs only the CUDA driver API (cuModuleLoadData, cuModuleGetFunction,
cuLaunchKernel), the C ABI (export_abi.py), a CMake file (CUDA::cuda_driver) and a verifying example.

The Hopper TMA kernels take tensor maps encoded on the host (cuTensorMapEncodeTiled) and a grid sized to
the SM count; the exported launcher does not encode maps yet, so those kernels are refused with a hint
(``--arch sm_80``: the mma.sync kernels run on Hopper too).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tracea.doctor.errors import UnsupportedError
from tracea.doctor.variants import Variant

from ..export_abi import (
    ABI_C,
    INTERNAL_H,
    Launcher,
    checks_c,
    header,
    header_cpp,
    launcher_for,
    manifest,
    prepare_out,
    readme,
    write_package,
)
from ..export_example import example_c
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

RUNTIME_C = """#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "tracea_internal.h"

extern const unsigned char tracea_cubin[];
extern const char tracea_ptx[];

static CUmodule tr_module;
static CUfunction tr_function;
static CUdeviceptr tr_scratch[TR_NSCRATCH + 1];
static CUdevice tr_device;
static int tr_retained;

static TraceaStatus tr_cu(CUresult rc, const char* what) {
    if (rc == CUDA_SUCCESS) return TRACEA_SUCCESS;
    const char *name = NULL, *text = NULL;
    cuGetErrorName(rc, &name);
    cuGetErrorString(rc, &text);
    return tr_fail(TRACEA_ERROR_CUDA, "%s: %s (%s)", what, name ? name : "unknown", text ? text : "");
}

#define TR_TRY(call) do { TraceaStatus tr_s = tr_cu((call), #call); if (tr_s != TRACEA_SUCCESS) return tr_s; } while (0)

static TraceaStatus tr_load(CUfunction* function);
static void tr_release(void);
static pthread_mutex_t tr_lock = PTHREAD_MUTEX_INITIALIZER;

/* Loads the kernel into the calling thread's current context (device 0's primary context if none); a
   failure part way releases what was taken, so the next call starts again. */
TraceaStatus tracea_init(void) {
    pthread_mutex_lock(&tr_lock);
    TraceaStatus s = TRACEA_SUCCESS;
    if (tr_function == NULL) {
        CUfunction function = NULL;
        s = tr_load(&function);
        if (s != TRACEA_SUCCESS) tr_release();
        else tr_function = function;
    }
    pthread_mutex_unlock(&tr_lock);
    return s;
}

static TraceaStatus tr_load(CUfunction* function) {
    CUcontext ctx = NULL;
    TR_TRY(cuInit(0));
    TR_TRY(cuCtxGetCurrent(&ctx));
    if (ctx == NULL) {
        TR_TRY(cuDeviceGet(&tr_device, 0));
        TR_TRY(cuDevicePrimaryCtxRetain(&ctx, tr_device));
        tr_retained = 1;
        TR_TRY(cuCtxSetCurrent(ctx));
    }
    CUdevice dev;
    int major = 0, minor = 0;
    TR_TRY(cuCtxGetDevice(&dev));
    TR_TRY(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    TR_TRY(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    if (major * 10 + minor < TR_MIN_CC)
        return tr_fail(TRACEA_ERROR_UNSUPPORTED, "tracea: the kernel was built for %s; this GPU is sm_%d%d",
                       TR_ARCH, major, minor);
    CUresult rc = cuModuleLoadData(&tr_module, tracea_cubin);
    if (rc != CUDA_SUCCESS)  /* a newer GPU than the cubin's: the driver compiles the PTX */
        rc = cuModuleLoadData(&tr_module, tracea_ptx);
    TR_TRY(rc);
    TR_TRY(cuModuleGetFunction(function, tr_module, TR_KERNEL));
    if (TR_SMEM > 48 * 1024)
        TR_TRY(cuFuncSetAttribute(*function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, TR_SMEM));
    for (int i = 0; i < TR_NSCRATCH; ++i) {  /* the kernel's own scratch: zeroed once, left at rest by each launch */
        TR_TRY(cuMemAlloc(&tr_scratch[i], tr_scratch_bytes[i]));
        TR_TRY(cuMemsetD8(tr_scratch[i], 0, tr_scratch_bytes[i]));
    }
    if (TR_COOPERATIVE) {  /* every block resident at once, or the launch would deadlock */
        int coop = 0, per_sm = 0, sms = 0;
        TR_TRY(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev));
        TR_TRY(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
        TR_TRY(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, *function, TR_BLOCK_X, TR_SMEM));
        if (!coop || per_sm * sms < TR_GRID_X)
            return tr_fail(TRACEA_ERROR_UNSUPPORTED, "tracea: the kernel needs its %d blocks resident at once; this "
                           "GPU holds %d (export again with the target's SM count)", TR_GRID_X, per_sm * sms);
    }
    return TRACEA_SUCCESS;
}

void tracea_shutdown(void) {
    pthread_mutex_lock(&tr_lock);
    tr_release();
    pthread_mutex_unlock(&tr_lock);
}

static void tr_release(void) {
    for (int i = 0; i < TR_NSCRATCH; ++i)
        if (tr_scratch[i]) cuMemFree(tr_scratch[i]);
    if (tr_module) cuModuleUnload(tr_module);
    if (tr_retained) cuDevicePrimaryCtxRelease(tr_device);
    for (int i = 0; i < TR_NSCRATCH; ++i) tr_scratch[i] = 0;
    tr_module = NULL;
    tr_function = NULL;
    tr_retained = 0;
}

static TraceaStatus tr_device_pointer(const char* fn, const char* name, const void* p) {
    unsigned int type = 0;
    if (cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
        return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s->data is not memory CUDA knows (a host pointer?)", fn, name);
    return TRACEA_SUCCESS;
}
"""


def _runtime_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The runtime's buffer and float-scalar parameter names (imported late: runtime.py loads NumPy)."""
    from .runtime import BUFFERS, FLOAT_SCALARS

    return BUFFERS, FLOAT_SCALARS


def scratch_bytes(op: Any, r: Rendered) -> dict[str, int]:
    """The kernel's own device buffers by parameter, as its kernel object allocates them: the K split's and
    gemv's ``workspace`` (runtime.py, gemv.py), the split softmax's partials and counters (softmax_split.py)."""
    out = {}
    if "workspace" in r.params and r.metadata.get("workspace_bytes"):
        out["workspace"] = int(r.metadata["workspace_bytes"])
    if "ws" in r.params and "sem" in r.params:
        out["ws"] = 8 * op.rows * max(1, r.grid[0] // op.rows)
        out["sem"] = 8 * op.rows
    return out


def _cooperative(r: Rendered) -> bool:
    return "ws" in r.params  # the split softmax: softmax_split.split_kernel's rule


def _scalar(name: str, value: float | int) -> str:
    if name in _runtime_names()[1]:
        return f"float s_{name} = {float(value)!r}f;"
    return f"int s_{name} = {int(value)};"


def _launcher_c(launcher: Launcher, r: Rendered, scalars: dict[str, Any], arch: str) -> str:
    names = {t.name for t in launcher.tensors}
    buffers = _runtime_names()[0]
    scratch = scratch_bytes(launcher.op, r)
    lines, args = [], []
    for p in r.params:
        if p in names:
            lines.append(f"    CUdeviceptr p_{p} = (CUdeviceptr)(uintptr_t){p}->data;")
        elif p in scratch:
            lines.append(f"    CUdeviceptr p_{p} = tr_scratch[{list(scratch).index(p)}];  /* scratch */")
        elif p in buffers:
            lines.append(f"    CUdeviceptr p_{p} = 0;  /* not used by this op */")
        else:
            lines.append(f"    {_scalar(p, scalars[p])}")
            args.append(f"&s_{p}")
            continue
        args.append(f"&p_{p}")
    pointers = "\n".join(f"    if (tr_device_pointer(\"{launcher.name}\", \"{t.name}\", {t.name}->data)) "
                         "return TRACEA_ERROR_INVALID_ARGUMENT;" for t in launcher.tensors)
    (gx, gy, gz), (bx, by, bz) = r.grid, r.block
    cc = int(arch.removeprefix("sm_").rstrip("a"))
    dims = f"{gx}, {gy}, {gz}, {bx}, {by}, {bz}, TR_SMEM, (CUstream)stream, args"
    launch = (f"return tr_cu(cuLaunchCooperativeKernel(tr_function, {dims}), \"cuLaunchCooperativeKernel\");"
              if _cooperative(r) else f"return tr_cu(cuLaunchKernel(tr_function, {dims}, NULL), \"cuLaunchKernel\");")
    return f"""/* launcher.c: {launcher.name} on the CUDA kernel {r.name} (generated, do not edit). */
#include <stddef.h>

#define TR_KERNEL "{r.entry}"
#define TR_ARCH "{arch}"
#define TR_MIN_CC {cc}
#define TR_SMEM {r.smem}
#define TR_NSCRATCH {len(scratch)}
#define TR_COOPERATIVE {int(_cooperative(r))}
#define TR_GRID_X {gx}
#define TR_BLOCK_X {bx}
static const size_t tr_scratch_bytes[TR_NSCRATCH + 1] = {{{", ".join([*map(str, scratch.values()), "0"])}}};
{RUNTIME_C}
{launcher.signature()} {{
{checks_c(launcher)}
    TraceaStatus s = tracea_init();  /* loads the module on the first call */
    if (s != TRACEA_SUCCESS) return s;
{pointers}
{chr(10).join(lines)}
    void* args[] = {{{", ".join(args)}}};
    {launch}
}}
"""


def _image_c(cubin: bytes, ptx: str) -> str:
    rows = [", ".join(str(b) for b in cubin[i:i + 24]) for i in range(0, len(cubin), 24)]
    text = ptx.encode()
    prow = [", ".join(str(b) for b in text[i:i + 24]) for i in range(0, len(text), 24)]
    return ("/* kernel_image.c: the kernel's cubin and PTX (generated from kernel/, do not edit). */\n"
            f"const unsigned char tracea_cubin[{len(cubin)}] = {{\n" + ",\n".join(rows) + "\n};\n"
            f"const char tracea_ptx[{len(text) + 1}] = {{\n" + ",\n".join([*prow, "0"]) + "\n};\n")


def _cmake(launcher: Launcher, r: Rendered) -> str:
    return f"""# Builds the exported Tracea kernel ({r.name}) with its driver-API launcher, the examples and CTest checks.
cmake_minimum_required(VERSION 3.18)
project(tracea_{launcher.op.kind} LANGUAGES C CXX)
set(CMAKE_C_STANDARD 11)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)

add_library(tracea STATIC src/tracea_abi.c src/launcher.c src/kernel_image.c)
target_include_directories(tracea PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}}/include PRIVATE src)
# only the driver API (libcuda and cuda.h): the toolkit's CUDA::cuda_driver, else cuda.h and libcuda found directly
find_package(CUDAToolkit QUIET)
if(TARGET CUDA::cuda_driver)
  target_link_libraries(tracea PUBLIC CUDA::cuda_driver)
else()
  find_path(TRACEA_CUDA_INCLUDE cuda.h HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda PATH_SUFFIXES include REQUIRED)
  find_library(TRACEA_CUDA_DRIVER cuda HINTS ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda
               PATH_SUFFIXES lib64 lib lib64/stubs lib/stubs REQUIRED)
  target_include_directories(tracea PUBLIC ${{TRACEA_CUDA_INCLUDE}})
  target_link_libraries(tracea PUBLIC ${{TRACEA_CUDA_DRIVER}})
endif()
find_package(Threads REQUIRED)
target_link_libraries(tracea PUBLIC Threads::Threads)

enable_testing()
add_executable(tracea_example example.c)
target_link_libraries(tracea_example PRIVATE tracea m)
add_test(NAME example COMMAND tracea_example)
add_test(NAME example_detects_wrong_result COMMAND tracea_example --perturb)
set_tests_properties(example_detects_wrong_result PROPERTIES PASS_REGULAR_EXPRESSION "MISMATCH")
add_executable(tracea_example_cpp example.cpp)
target_link_libraries(tracea_example_cpp PRIVATE tracea)
add_test(NAME example_cpp COMMAND tracea_example_cpp)
"""


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


def _refuse_unknown(op: Any, r: Rendered, variant: Variant, scalars: dict[str, Any]) -> None:
    """Every kernel parameter must be an op tensor, a known scratch buffer or a scalar; the Hopper TMA
    kernels' tensor maps are not (yet)."""
    known = {*op.shapes(), *_runtime_names()[0], *scratch_bytes(op, r), *scalars}
    unknown = [p for p in r.params if p not in known]
    if any(p.startswith("tm") for p in unknown):
        raise UnsupportedError(
            f"export: {variant.id} ({r.name}) takes {', '.join(unknown)}: Hopper TMA tensor maps "
            "(cuTensorMapEncodeTiled) that exported launchers do not encode yet",
            f"pass --variant cuda-mma-sync.{variant.op} (mma.sync, which Hopper runs too)")
    if unknown:
        raise UnsupportedError(f"export: {variant.id} ({r.name}) takes {', '.join(unknown)}, which exported "
                               "launchers do not provide yet", "pass another --variant or --schedule")


def export(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None,
           force: bool = False, schedule_source: str = "given") -> list[Path]:
    from tracea.kernels.ops import tolerance

    from .build import compile_kernel

    v, r, scalars, artifact = compile_kernel(op, variant, schedule, host, arch)
    _refuse_unknown(op, r, v, scalars)
    launcher = launcher_for(op, [p for p in r.params if p in _runtime_names()[0]])
    target = artifact.metadata["arch"]
    cubin = Path(artifact.binary).read_bytes()
    ptx = _ptx(r.source, r.name, target)
    out = Path(out_dir)
    prepare_out(out, force)
    files: dict[str, str | bytes] = {
        "include/tracea.h": header(launcher, "cuda"),
        "include/tracea.hpp": header_cpp(launcher),
        "src/tracea_internal.h": INTERNAL_H,
        "src/tracea_abi.c": ABI_C,
        "src/launcher.c": _launcher_c(launcher, r, scalars, target),
        "src/kernel_image.c": _image_c(cubin, ptx),
        f"kernel/{r.name}.cu": r.source,
        f"kernel/{r.name}.cubin": cubin,
        f"kernel/{r.name}.ptx": ptx,
        "example.c": example_c(launcher, tolerance(op), DEVICE_C),
        "example.cpp": example_cpp(launcher),
        "CMakeLists.txt": _cmake(launcher, r),
        "schedule.json": json.dumps(schedule.to_json(), indent=2) + "\n",
    }
    files["README.md"] = readme(
        launcher, "CUDA", r.name, v.id, schedule_source, target,
        f"The kernel (`kernel/{r.name}.cu`, compiled by NVRTC for {target}) is embedded in `src/kernel_image.c` as "
        "its cubin and PTX; the launcher uses only the CUDA driver API (link CUDA::cuda_driver). It loads the module "
        "into the context current on the calling thread at `tracea_init()` (device 0's primary context if none) and "
        "launches on the given stream; views hold device pointers. On a GPU newer than the cubin's the driver "
        "compiles the PTX." + (" The kernel's scratch buffers (" + ", ".join(scratch_bytes(op, r)) + ") belong to the "
                               "library: one launch in flight at a time." if scratch_bytes(op, r) else ""))
    res = artifact.metadata.get("resources", {})
    kernel = {"name": r.name, "entry": r.entry, "source": f"kernel/{r.name}.cu",
              "source_sha256": hashlib.sha256(r.source.encode()).hexdigest(), "grid": list(r.grid),
              "block": list(r.block), "smem_bytes": r.smem, "regs_per_thread": res.get("regs_per_thread"),
              "spills": res.get("spills"), "compiler": artifact.compiler, "compiler_version": artifact.compiler_version}
    files["manifest.json"] = manifest(launcher, "cuda", v.id, schedule.to_json(), schedule_source,
                                      {"arch": target}, kernel, files)
    return write_package(out, files)


def example_cpp(launcher: Launcher) -> str:
    """tracea.hpp in use on the GPU: a Module, and a wrong view turned into a ``tracea::Error``."""
    first = launcher.tensors[0]
    code = {"fp32": "TRACEA_DTYPE_F32", "fp16": "TRACEA_DTYPE_F16", "bf16": "TRACEA_DTYPE_BF16"}[launcher.dtype]
    views = "\n".join(
        f"    static const int64_t s_{t.name}[] = TRACEA_{launcher.op.kind.upper()}_{t.name.upper()}_SHAPE;\n"
        f"    TraceaTensorView {t.name} = tracea_view(&dummy, {code}, {len(t.shape)}, s_{t.name});"
        for t in launcher.tensors)
    args = ", ".join(t.name for t in launcher.tensors)
    return f"""// example.cpp: tracea.hpp in use (RAII module, exceptions). Generated by `tracea export`.
#include <cstdio>

#include "tracea.hpp"

int main() {{
    try {{
        tracea::Module module;  // checks the ABI version, loads the kernel
        int dummy = 0;
{views}
        {first.name}.shape[0] += 1;
        try {{
            module.{launcher.op.kind}({args});
        }} catch (const tracea::Error& e) {{
            std::printf("tracea::Error (status %d): %s\\n", static_cast<int>(e.status()), e.what());
            return e.status() == TRACEA_ERROR_INVALID_ARGUMENT ? 0 : 1;
        }}
        std::printf("a wrong shape did not throw\\n");
    }} catch (const tracea::Error& e) {{
        std::printf("tracea::Module: %s\\n", e.what());
    }}
    return 1;
}}
"""
