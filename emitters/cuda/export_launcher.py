"""``src/launcher.c`` of a CUDA package: the runtime that needs only the CUDA driver API (``RUNTIME_C``: load
the cubin, or the PTX on a newer GPU, into the current context; the kernel's scratch buffers; the
persistent and cooperative grids' residency checks), the kernel's parameters as the launcher fills them
(tensors, scratch, scalars, the Hopper GEMM's tensor maps from export_maps.py) and the launch."""

from __future__ import annotations

from typing import Any

from ..export_abi import Launcher, checks_c
from .export_maps import MAP_OPERANDS, TMA_C, TensorMaps, map_lines
from .hopper.splitk import spread_blocks
from .render import Rendered

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


def runtime_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The runtime's buffer and float-scalar parameter names (imported late: runtime.py loads NumPy)."""
    from .runtime import BUFFERS, FLOAT_SCALARS

    return BUFFERS, FLOAT_SCALARS


def scratch_bytes(op: Any, r: Rendered) -> dict[str, int]:
    """The kernel's own device buffers by parameter, as its kernel object allocates them: the K split's and
    gemv's ``workspace`` (runtime.py, gemv.py), the Hopper split-K's partials and semaphores
    (``tma.split_args``), the split softmax's partials and counters (softmax_split.py), an FP8 C's amax words
    (``hopper/fp8_out.py``: left zero by every launch)."""
    from .hopper import fp8_out

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
    if "amax_ws" in r.params:
        out["amax_ws"] = fp8_out.SCRATCH_BYTES
    return out


def _cooperative(r: Rendered) -> bool:
    return bool(r.metadata.get("launch", {}).get("cooperative"))  # the split softmax (softmax_split.py)


def _scalar(name: str, value: float | int) -> str:
    if name in runtime_names()[1]:
        return f"float s_{name} = {float(value)!r}f;"
    return f"int s_{name} = {int(value)};"


def launcher_c(launcher: Launcher, r: Rendered, scalars: dict[str, Any], arch: str,
                maps: TensorMaps | None) -> str:
    scratch = scratch_bytes(launcher.op, r)
    lines, args = _arguments(launcher, r, scalars, maps, scratch)
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
    tma = _tma_c(maps)
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
#define TR_MIN_GRID {spread_blocks(plan, r.metadata)}
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


def _arguments(launcher: Launcher, r: Rendered, scalars: dict[str, Any], maps: TensorMaps | None,
               scratch: dict[str, int]) -> tuple[list[str], list[str]]:
    """(the lines that make each kernel argument, the ``args[]`` entries in the kernel's order): a tensor's
    data pointer, a scratch buffer, a null pointer for a buffer this op does not use, a scalar, or (Hopper)
    a tensor map encoded on the call and the TMA-store flag."""
    names = {t.name for t in launcher.tensors}
    buffers = runtime_names()[0]
    lines, args = [], []
    for p in r.params:
        if maps is not None and p in MAP_OPERANDS:
            lines += map_lines(launcher, maps, p)
            args.append(f"&m_{p}")
            continue
        if maps is not None and p == "store_tma":
            args.append("&s_store_tma")
            continue
        if p in names:
            lines.append(f"    CUdeviceptr p_{p} = (CUdeviceptr)(uintptr_t){p}->data;")
        elif p in scratch:
            lines.append(f"    CUdeviceptr p_{p} = tr_scratch[{list(scratch).index(p)}];  /* scratch */")
        elif p in buffers or p == "workspace":  # a split workspace this schedule does not need: a null pointer
            lines.append(f"    CUdeviceptr p_{p} = 0;  /* not used by this op */")
        else:
            lines.append(f"    {_scalar(p, scalars[p])}")
            args.append(f"&s_{p}")
            continue
        args.append(f"&p_{p}")
    return lines, args


def _tma_c(maps: TensorMaps | None) -> str:
    """The tensor-map encoder and its element type and L2 promotion (Hopper kernels); nothing otherwise."""
    if maps is None:
        return ""
    from .tma import L2_PROMOTION, OFF_LINE_PROMOTION

    dtype = "BFLOAT16" if maps.dtype == "bf16" else "FLOAT16"
    return (f"#define TR_MAP_DTYPE CU_TENSOR_MAP_DATA_TYPE_{dtype}\n"
            f"#define TR_MAP_L2_PROMOTION CU_TENSOR_MAP_L2_PROMOTION_{L2_PROMOTION}\n"
            f"#define TR_MAP_OFF_LINE_PROMOTION CU_TENSOR_MAP_L2_PROMOTION_{OFF_LINE_PROMOTION}\n" + TMA_C)
