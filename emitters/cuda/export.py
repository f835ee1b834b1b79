"""``tracea export ... --backend cuda``: the kernel's cubin and PTX (embedded in the library and shipped
beside it), a launcher that needs only the CUDA driver API (cuModuleLoadData, cuModuleGetFunction,
cuLaunchKernel), the C ABI (export_abi.py), a CMake file (CUDA::cuda_driver, install and package config) and
a verifying example.

The Hopper GEMM (``cuda-wgmma.gemm``) takes its operands as TMA tensor maps passed by value: the launcher
encodes them itself (cuTensorMapEncodeTiled, the geometry of ``hopper/gemm.tma_boxes`` as ``tma.py``
encodes it for Tracea's own runs) and keeps the maps of the last few addresses of each operand. A shape
whose rows TMA cannot address (``tma_unsupported``) and the other TMA kernels (the Hopper conv and
attention) are refused with a hint (``--variant cuda-mma-sync.*``: the mma.sync kernels run on Hopper too).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracea.doctor.errors import UnsupportedError
from tracea.doctor.variants import Variant

from ..export_abi import (
    Launcher,
    check_prefix,
    checks_c,
    default_prefix,
    launcher_for,
    manifest,
    package_files,
    prepare_out,
    readme,
    write_package,
)
from ..export_cmake import cmake_examples, cmake_head, cmake_package, config_in
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
#include <string.h>

#include "tracea_abi.inc"

extern const unsigned char @P@_cubin[];
extern const char @P@_ptx[];

static CUmodule tr_module;
static CUfunction tr_function;
static CUdeviceptr tr_scratch[TR_NSCRATCH + 1];
static CUdevice tr_device;
static int tr_retained;
static unsigned int tr_grid_x = TR_GRID_X;

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
TraceaStatus @P@_init(void) {
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
    int major = 0, minor = 0, sms = 0;
    TR_TRY(cuCtxGetDevice(&dev));
    TR_TRY(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    TR_TRY(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    TR_TRY(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    /* an architecture-specific target (sm_90a) runs on its own compute capability only */
    if (TR_ARCH_SPECIFIC ? major * 10 + minor != TR_MIN_CC : major * 10 + minor < TR_MIN_CC)
        return tr_fail(TRACEA_ERROR_UNSUPPORTED, "@P@: the kernel was built for %s; this GPU is sm_%d%d",
                       TR_ARCH, major, minor);
    CUresult rc = cuModuleLoadData(&tr_module, @P@_cubin);
    if (rc != CUDA_SUCCESS)  /* a newer GPU than the cubin's: the driver compiles the PTX */
        rc = cuModuleLoadData(&tr_module, @P@_ptx);
    TR_TRY(rc);
    TR_TRY(cuModuleGetFunction(function, tr_module, TR_KERNEL));
    if (TR_SMEM > 48 * 1024)
        TR_TRY(cuFuncSetAttribute(*function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, TR_SMEM));
    for (int i = 0; i < TR_NSCRATCH; ++i) {  /* the kernel's own scratch: zeroed once, left at rest by each launch */
        TR_TRY(cuMemAlloc(&tr_scratch[i], tr_scratch_bytes[i]));
        TR_TRY(cuMemsetD8(tr_scratch[i], 0, tr_scratch_bytes[i]));
    }
    tr_grid_x = TR_GRID_X;
    if (TR_PERSISTENT) {  /* a persistent grid walks every tile whatever its size: as many blocks as fit at once here */
        unsigned int fit = (unsigned int)(sms / TR_CLUSTER) * TR_CLUSTER;
#if TR_CLUSTER > 1  /* the driver's count of resident clusters, as tma.Launcher asks it (else SMs / cluster) */
        {
            CUlaunchAttribute attr;
            CUlaunchConfig cfg;
            int clusters = 0;
            memset(&attr, 0, sizeof attr);
            memset(&cfg, 0, sizeof cfg);
            attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attr.value.clusterDim.x = TR_CLUSTER;
            attr.value.clusterDim.y = 1;
            attr.value.clusterDim.z = 1;
            cfg.gridDimX = TR_CLUSTER;
            cfg.gridDimY = cfg.gridDimZ = 1;
            cfg.blockDimX = TR_BLOCK_X;
            cfg.blockDimY = cfg.blockDimZ = 1;
            cfg.sharedMemBytes = TR_SMEM;
            cfg.attrs = &attr;
            cfg.numAttrs = 1;
            if (cuOccupancyMaxActiveClusters(&clusters, *function, &cfg) == CUDA_SUCCESS && clusters > 0)
                fit = (unsigned int)clusters * TR_CLUSTER;
        }
#endif
        if (fit >= TR_CLUSTER && fit < tr_grid_x) tr_grid_x = fit;
        if (tr_grid_x < TR_MIN_GRID)
            return tr_fail(TRACEA_ERROR_UNSUPPORTED, "@P@: the kernel's split-K fix-up needs %d blocks resident; "
                           "this GPU holds %u (export again on it)", TR_MIN_GRID, tr_grid_x);
    }
    if (TR_COOPERATIVE) {  /* every block resident at once, or the launch would deadlock */
        int coop = 0, per_sm = 0;
        TR_TRY(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, dev));
        TR_TRY(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, *function, TR_BLOCK_X, TR_SMEM));
        if (!coop || per_sm * sms < TR_GRID_X)
            return tr_fail(TRACEA_ERROR_UNSUPPORTED, "@P@: the kernel needs its %d blocks resident at once; this "
                           "GPU holds %d (export again with the target's SM count)", TR_GRID_X, per_sm * sms);
    }
    return TRACEA_SUCCESS;
}

void @P@_shutdown(void) {
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

# The Hopper GEMM's tensor maps (tma.py's encoding: 2-D, 128B swizzle, zero fill out of bounds). A map holds
# only the address and the geometry, and the geometry is the export's: the maps of the last TR_MAP_SLOTS
# addresses of each operand are kept, so a call with the same buffers encodes nothing.
TMA_C = """
#define TR_MAP_SLOTS 8
typedef struct { const void* ptr; CUtensorMap map; } TrMapSlot;
static TrMapSlot tr_maps[3][TR_MAP_SLOTS];  /* A, B, C */
static unsigned int tr_map_next[3];
static pthread_mutex_t tr_map_lock = PTHREAD_MUTEX_INITIALIZER;

/* The map of operand `which` (a row-major `outer` x `inner` 16-bit matrix at `ptr`, boxes of box0 x box1). */
static TraceaStatus tr_tensor_map(const char* fn, const char* name, int which, const void* ptr, uint64_t inner,
                                  uint64_t outer, uint32_t box0, uint32_t box1, CUtensorMap* map) {
    if ((uintptr_t)ptr % 16)
        return tr_fail(TRACEA_ERROR_INVALID_ARGUMENT, "%s: %s->data is not 16-byte aligned (TMA needs it)", fn, name);
    pthread_mutex_lock(&tr_map_lock);
    for (int i = 0; i < TR_MAP_SLOTS; ++i)
        if (tr_maps[which][i].ptr == ptr) {
            *map = tr_maps[which][i].map;
            pthread_mutex_unlock(&tr_map_lock);
            return TRACEA_SUCCESS;
        }
    pthread_mutex_unlock(&tr_map_lock);
    const cuuint64_t dims[2] = {inner, outer};
    const cuuint64_t strides[1] = {inner * 2};  /* bytes between rows */
    const cuuint32_t box[2] = {box0, box1};
    const cuuint32_t steps[2] = {1, 1};
    TraceaStatus s = tr_cu(cuTensorMapEncodeTiled(map, TR_MAP_DTYPE, 2, (void*)ptr, dims, strides, box, steps,
                                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                  TR_MAP_L2_PROMOTION, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                           "cuTensorMapEncodeTiled");
    if (s != TRACEA_SUCCESS) return s;
    pthread_mutex_lock(&tr_map_lock);
    TrMapSlot* slot = &tr_maps[which][tr_map_next[which]++ % TR_MAP_SLOTS];
    slot->ptr = ptr;
    slot->map = *map;
    pthread_mutex_unlock(&tr_map_lock);
    return TRACEA_SUCCESS;
}
"""

def _runtime_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The runtime's buffer and float-scalar parameter names (imported late: runtime.py loads NumPy)."""
    from .runtime import BUFFERS, FLOAT_SCALARS

    return BUFFERS, FLOAT_SCALARS


def scratch_bytes(op: Any, r: Rendered) -> dict[str, int]:
    """The kernel's own device buffers by parameter, as its kernel object allocates them: the K split's and
    gemv's ``workspace`` (runtime.py, gemv.py), the Hopper split-K's partials and semaphores
    (``tma.split_args``), the split softmax's partials and counters (softmax_split.py)."""
    out = {}
    if "workspace" in r.params and r.metadata.get("workspace_bytes"):
        out["workspace"] = int(r.metadata["workspace_bytes"])
    plan = r.metadata.get("split_k")
    if plan is not None and "ws" in r.params:
        out["ws"] = max(16, int(plan["workspace_bytes"]))
        out["sem"] = max(4, 4 * int(plan["semaphores"]))
    elif "ws" in r.params and "sem" in r.params:
        out["ws"] = 8 * op.rows * max(1, r.grid[0] // op.rows)
        out["sem"] = 8 * op.rows
    return out


def _cooperative(r: Rendered) -> bool:
    return bool(r.metadata.get("launch", {}).get("cooperative"))  # the split softmax (softmax_split.py)


def _scalar(name: str, value: float | int) -> str:
    if name in _runtime_names()[1]:
        return f"float s_{name} = {float(value)!r}f;"
    return f"int s_{name} = {int(value)};"


# ------------------------------------------------------------------------------------ the Hopper GEMM

MAP_OPERANDS = {"tmA": ("a", 0), "tmB": ("b", 1), "tmC": ("out", 2)}  # kernel parameter -> (tensor, cache row)


@dataclass(frozen=True)
class TensorMaps:
    """What the launcher encodes for the Hopper GEMM: per map (inner, outer, box inner, box outer) of a
    row-major 16-bit matrix, and whether C is stored through its map (``tma.c_output_map``'s rule; the
    launcher also needs C's address 16-byte aligned, else the kernel's direct stores run)."""

    dtype: str
    geometry: dict[str, tuple[int, int, int, int]]
    store_tma: bool

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "store_tma": self.store_tma, "encoding": "tiled 2-D, 128B swizzle, zero fill",
                "maps": {p: dict(zip(("inner", "outer", "box_inner", "box_outer"), g, strict=True))
                         for p, g in self.geometry.items()}}


def tensor_maps(op: Any, r: Rendered, schedule: Any) -> TensorMaps | None:
    """The Hopper GEMM's maps (None for a kernel that takes none); an operand TMA cannot address is refused."""
    from .hopper import gemm

    if op.kind != "gemm" or r.entry != gemm.KERNEL_NAME:
        return None
    why = gemm.tma_unsupported(op)
    if why:  # Tracea's own runs copy such an operand into a padded buffer at every launch; a package does not
        raise UnsupportedError(f"export: {why}", "pass --variant cuda-mma-sync.gemm (mma.sync, which Hopper runs too)")
    boxes = gemm.tma_boxes(op, schedule)
    geometry = {f"tm{w.upper()}": (*boxes[w]["dims"], *boxes[w]["box"]) for w in ("a", "b")}
    geometry["tmC"] = (op.n, op.m, 64, 64)
    return TensorMaps(op.dtype.value, geometry, schedule.store == "tma" and (op.n * 2) % 16 == 0)


def _map_lines(launcher: Launcher, maps: TensorMaps, param: str) -> list[str]:
    """The launcher's lines that fill ``m_<param>`` (and ``s_store_tma`` with C's map)."""
    tensor, which = MAP_OPERANDS[param]
    inner, outer, b0, b1 = maps.geometry[param]
    encode = [f"s = tr_tensor_map(\"{launcher.name}\", \"{tensor}\", {which}, {tensor}->data, {inner}, {outer}, "
              f"{b0}, {b1}, &m_{param});", "if (s != TRACEA_SUCCESS) return s;"]
    if param != "tmC":
        return [f"    CUtensorMap m_{param};", *(f"    {ln}" for ln in encode)]
    lines = [f"    CUtensorMap m_{param};", f"    memset(&m_{param}, 0, sizeof m_{param});", "    int s_store_tma = 0;"]
    if maps.store_tma:
        lines += ["    if ((uintptr_t)out->data % 16 == 0) {  /* else the kernel's direct stores */",
                  *(f"        {ln}" for ln in encode), "        s_store_tma = 1;", "    }"]
    return lines


# ------------------------------------------------------------------------------------ the launcher


def _launcher_c(launcher: Launcher, r: Rendered, scalars: dict[str, Any], arch: str,
                maps: TensorMaps | None) -> str:
    names = {t.name for t in launcher.tensors}
    buffers = _runtime_names()[0]
    scratch = scratch_bytes(launcher.op, r)
    lines, args = [], []
    for p in r.params:
        if maps is not None and p in MAP_OPERANDS:
            lines += _map_lines(launcher, maps, p)
            args.append(f"&m_{p}")
            continue
        if maps is not None and p == "store_tma":
            args.append("&s_store_tma")
            continue
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
    cc = int(arch.removeprefix("sm_").rstrip("af"))
    launch_meta = r.metadata.get("launch", {})
    persistent = bool(launch_meta.get("persistent"))
    cluster = int(r.metadata.get("tile", {}).get("cluster", 1)) if persistent else 1
    plan = r.metadata.get("split_k") or {}
    dims = f"tr_grid_x, {gy}, {gz}, {bx}, {by}, {bz}, TR_SMEM, (CUstream)stream, args"
    launch = (f"return tr_cu(cuLaunchCooperativeKernel(tr_function, {dims}), \"cuLaunchCooperativeKernel\");"
              if _cooperative(r) else f"return tr_cu(cuLaunchKernel(tr_function, {dims}, NULL), \"cuLaunchKernel\");")
    tma = ""
    if maps is not None:
        from .tma import L2_PROMOTION

        dtype = "BFLOAT16" if maps.dtype == "bf16" else "FLOAT16"
        tma = (f"#define TR_MAP_DTYPE CU_TENSOR_MAP_DATA_TYPE_{dtype}\n"
               f"#define TR_MAP_L2_PROMOTION CU_TENSOR_MAP_L2_PROMOTION_{L2_PROMOTION}\n" + TMA_C)
    return f"""/* launcher.c: {launcher.name} on the CUDA kernel {r.name} (generated, do not edit). Everything here
 * but the package's own {launcher.prefix}_ functions is static. */
#include <stddef.h>

#define TR_KERNEL "{r.entry}"
#define TR_ARCH "{arch}"
#define TR_MIN_CC {cc}
#define TR_ARCH_SPECIFIC {int(arch[-1] in "af")}
#define TR_SMEM {r.smem}
#define TR_NSCRATCH {len(scratch)}
#define TR_COOPERATIVE {int(_cooperative(r))}
#define TR_GRID_X {gx}
#define TR_BLOCK_X {bx}
#define TR_PERSISTENT {int(persistent)}
#define TR_CLUSTER {cluster}
#define TR_MIN_GRID {int(plan["splits"]) if plan.get("spread") else 1}
static const size_t tr_scratch_bytes[TR_NSCRATCH + 1] = {{{", ".join([*map(str, scratch.values()), "0"])}}};
{RUNTIME_C.replace("@P@", launcher.prefix)}{tma}
{launcher.signature()} {{
{checks_c(launcher)}
    TraceaStatus s = {launcher.api("init")}();  /* loads the module on the first call */
    if (s != TRACEA_SUCCESS) return s;
{pointers}
{chr(10).join(lines)}
    void* args[] = {{{", ".join(args)}}};
    {launch}
}}
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
    known = {*op.shapes(), *_runtime_names()[0], *scratch_bytes(op, r), *scalars,
             *((*MAP_OPERANDS, "store_tma") if maps is not None else ())}
    unknown = [p for p in r.params if p not in known]
    if any(p.startswith("tm") for p in unknown):
        raise UnsupportedError(
            f"export: {variant.id} ({r.name}) takes {', '.join(unknown)}: Hopper TMA tensor maps that exported "
            "launchers encode for the GEMM only (cuTensorMapEncodeTiled)",
            f"pass --variant cuda-mma-sync.{variant.op} (mma.sync, which Hopper runs too)")
    if unknown:
        raise UnsupportedError(f"export: {variant.id} ({r.name}) takes {', '.join(unknown)}, which exported "
                               "launchers do not provide yet", "pass another --variant or --schedule")
    plan = r.metadata.get("split_k") or {}
    if plan.get("spread") and plan["splits"] > r.grid[0]:
        raise UnsupportedError(f"export: the split-K spread fix-up needs all {plan['splits']} slices of a tile "
                               f"resident, but the grid holds {r.grid[0]} blocks", "a schedule with split_fix 'last'")


def export(op: Any, variant: Variant | str, schedule: Any, host: Any, out_dir: str | Path, arch: str | None = None,
           force: bool = False, schedule_source: str = "given", prefix: str | None = None) -> list[Path]:
    """The package (``Backend.export``) under ``prefix`` (default: ``export_abi.default_prefix``)."""
    from tracea.kernels.ops import tolerance

    from .build import compile_kernel

    prefix = check_prefix(prefix) if prefix is not None else default_prefix(op, "cuda")
    v, r, scalars, artifact = compile_kernel(op, variant, schedule, host, arch)
    maps = tensor_maps(op, r, schedule)
    plan = r.metadata.get("split_k")
    if plan is not None:  # the Hopper split-K's slicing, as tma.split_args passes it
        scalars = {**scalars, "splits": plan["splits"], "dp_tiles": plan["dp_tiles"]}
    _refuse_unknown(op, r, v, scalars, maps)
    order = [MAP_OPERANDS[p][0] if maps is not None and p in MAP_OPERANDS else p for p in r.params]
    launcher = launcher_for(op, list(dict.fromkeys(p for p in order if p in _runtime_names()[0])), prefix)
    target = artifact.metadata["arch"]
    cubin = Path(artifact.binary).read_bytes()
    ptx = _ptx(r.source, r.name, target)
    out = Path(out_dir)
    prepare_out(out, force)
    files: dict[str, str | bytes] = {
        **package_files(launcher, "cuda"),
        "src/launcher.c": _launcher_c(launcher, r, scalars, target, maps),
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
    code = {"fp32": "TRACEA_DTYPE_F32", "fp16": "TRACEA_DTYPE_F16", "bf16": "TRACEA_DTYPE_BF16"}[launcher.dtype]
    views = "\n".join(
        f"        static const int64_t s_{t.name}[] = {launcher.shape_macro(t)}_SHAPE;\n"
        f"        {t.view_type} {t.name} = {t.view_maker}(&dummy, {code}, {len(t.shape)}, s_{t.name});"
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
