"""`tracea export` for CUDA without a GPU: packages for sm_80 and sm_90a (the wgmma GEMM and its tensor maps,
a cluster, split-K) render, and their launcher and example compile and link against cuda.h; on a stand-in
libcuda the example says there is no GPU, and on a stand-in driver that answers as an sm_90 would, the
launcher loads the kernel once, owns and zeroes its scratch, encodes the tensor maps once per address and
launches with the export's geometry and every argument in place. GPU runs: tests/export/test_export_gpu.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from export_packages import CMAKE, cuda_include, defined_symbols, export, needs_nvrtc

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
    # cluster sharing B, split-K (its workspace and semaphores), the TMA store of C, bias and relu; N = 264: B's and
    # C's 528-byte rows start off 128-byte lines, so their maps take the other L2 promotion (tma.promotion_for)
    "gemm-bf16-wgmma-cluster-split": ["gemm", "--m", "512", "--n", "264", "--k", "2048", "--dtype", "bf16",
                                      "--layout-a", "col", "--epilogue", "bias,relu", "--variant", "cuda-wgmma.gemm",
                                      "--arch", "sm_90a", "--schedule", WGMMA_SPLIT],
    # the decode GEMM fed by TMA (gemv_tma): two tensor maps (B in 64 x 64 boxes, A's 3 rows in 8-row boxes), the
    # splits meeting in a cluster, no workspace (a null pointer where the kernel takes one)
    "gemm-bf16-decode-tma": ["gemm", "--m", "3", "--n", "4096", "--k", "1024", "--dtype", "bf16", "--layout-b", "col",
                             "--epilogue", "bias", "--variant", "cuda-wgmma.gemm", "--arch", "sm_90a"],
}


@needs_nvrtc
@pytest.mark.skipif(cuda_include() is None or shutil.which("gcc") is None or shutil.which("g++") is None,
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
    decode = "cuda-wgmma.gemm" in args and int(args[args.index("--m") + 1]) <= 32  # gemv_tma: the hero
    if decode:
        _check_decode_launcher(m, launcher)
    elif "cuda-wgmma.gemm" in args:
        _check_wgmma_launcher(m, launcher)
    inc = cuda_include()
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
    if decode:
        _check_fake_decode_run(m, _run_on_fake_driver(tmp_path, pkg, m, objs[:2], inc))
    elif "cuda-wgmma.gemm" in args:
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


def _check_decode_launcher(m: dict, launcher: str) -> None:
    """The TMA-fed decode GEMM: the launcher encodes B's and A's maps with gemv_tma.map_geometry and passes
    them first; the unused split workspace is a null pointer (a pointer-sized argument, not an int)."""
    from tracea.emitters.cuda import gemv_tma
    from tracea.kernels import Op

    op = Op.from_json(m["op"])
    assert m["schedule"]["core"] == "gemv_tma" and m["kernel"]["entry"].startswith("tr_gemv_tma_bf16_c_")
    maps, p = m["kernel"]["tensor_maps"]["maps"], m["prefix"]
    assert set(maps) == {"tmA", "tmB"} and not m["kernel"]["tensor_maps"]["store_tma"]
    for param, tensor, which in (("tmA", "a", 0), ("tmB", "b", 1)):
        g = maps[param]
        assert (g["inner"], g["outer"], g["box_inner"], g["box_outer"]) == gemv_tma.map_geometry(op)[param]
        assert (f"tr_tensor_map(\"{p}_gemm\", \"{tensor}\", {which}, {tensor}->data, {g['inner']}, {g['outer']}, "
                f"{g['box_inner']}, {g['box_outer']}, &m_{param});") in launcher
    args = re.search(r"void\* args\[\] = \{(.*)\};", launcher).group(1).split(", ")
    assert args == ["&m_tmA", "&m_tmB", "&p_out", "&p_bias", "&p_residual", "&p_workspace", "&s_alpha"]
    assert f"TraceaStatus {p}_gemm(const TraceaConstTensorView* a, const TraceaConstTensorView* b, " in launcher
    assert "CUdeviceptr p_workspace = 0;" in launcher and "#define TR_NSCRATCH 0" in launcher


def _check_wgmma_launcher(m: dict, launcher: str) -> None:
    """The launcher encodes the three maps with the geometry Tracea's own runs use (hopper/gemm.tma_boxes)
    and passes them first, by address, in the kernel's parameter order; split-K's buffers are its own."""
    from tracea.emitters import registry
    from tracea.emitters.cuda.hopper import splitk
    from tracea.emitters.cuda.hopper.gemm import PARAMS, tma_boxes
    from tracea.kernels import Op

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
             l2 == (strides[0] % 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B : CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
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
    with C's address 8 bytes off, once with A's, and where the op writes a side output such as an FP8 C's amax,
    once with that output over C), run on the stand-in driver; its output."""
    from tracea.emitters.export_abi import launcher_for
    from tracea.kernels import Op

    p, kind = m["prefix"], m["op"]["op"]
    op = Op.from_json(m["op"])
    names = list(m["tensors"])
    outs = {"out", *op.side_outputs()}
    code = {t.name: t.code for t in launcher_for(op, [n for n in names if n not in outs], p).tensors}  # a type a view
    views = "\n".join(
        f"    static const int64_t s_{t}[] = {p.upper()}_{t.upper()}_SHAPE;\n"
        f"    {'TraceaTensorView' if t in outs else 'TraceaConstTensorView'} v_{t} = "
        f"{'tracea_view' if t in outs else 'tracea_const_view'}((void*)(uintptr_t){(i + 1) << 28}ull, {code[t]}, "
        f"{len(m['tensors'][t])}, s_{t});" for i, t in enumerate(names))
    call = f"{p}_{kind}({', '.join(f'&v_{t}' for t in names)}, (void*)0x77)"
    side = sorted(op.side_outputs())
    over = f"        if (i == 5) v_{side[0]}.data = v_out.data;\n" if side else ""
    (tmp_path / "fake_main.c").write_text(f"""#include <stdint.h>
#include <stdio.h>
#include "{p}/tracea.h"
int main(void) {{
{views}
    for (int i = 0; i < {6 if side else 5}; ++i) {{
        if (i == 3) v_out.data = (char*)v_out.data + 8;
        if (i == 4) v_{names[0]}.data = (const char*)v_{names[0]}.data + 8;
{over}
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


def _check_fake_decode_run(m: dict, out: str) -> None:
    """The TMA-fed decode GEMM on the stand-in driver: no scratch, B's and A's maps encoded once per address with
    gemv_tma's geometry and passed by value first, the export's grid (its clusters compiled in), every pointer in
    place and the unused workspace null; A (the first view) 8 bytes off is refused before any launch."""
    from tracea.emitters.cuda import gemv_tma
    from tracea.kernels import Op

    op = Op.from_json(m["op"])
    lines = out.splitlines()
    assert lines[1:3] == ["load cubin", f"function {m['kernel']['entry']}"] and not any(
        ln.startswith("alloc ") for ln in lines)
    addr = {t: (k + 1) << 28 for k, t in enumerate(m["tensors"])}
    calls = out.split("call ")[1:]
    assert all("status 0" in c for c in calls[:4]) and "status 1" in calls[4] and "not 16-byte aligned" in calls[4]
    encoded = [[ln.split()[2] for ln in call.splitlines() if ln.startswith("encode ")] for call in calls]
    assert encoded == [[str(addr["a"]), str(addr["b"])], [], [], [], []]
    assert list(m["tensors"])[:2] == ["a", "b"]  # the C function's views in the GEMM's order
    (gx, gy, gz), (bx, by, bz) = m["kernel"]["grid"], m["kernel"]["block"]
    geometry = gemv_tma.map_geometry(op)
    for i, call in enumerate(calls[:4]):
        head, params = next(ln for ln in call.splitlines() if ln.startswith("launch ")).split(" params ")
        assert head == f"launch grid {gx} {gy} {gz} block {bx} {by} {bz} smem {m['kernel']['smem_bytes']} stream 119"
        words = params.split()
        for word, (param, tensor) in zip(words[:2], (("tmA", "a"), ("tmB", "b")), strict=True):
            inner, outer, b0, b1 = geometry[param]
            assert word.split(":")[1:] == [str(v) for v in (addr[tensor], inner, outer, inner * 2, b0, b1, 1)] + [
                "7ace"], word
        assert words[2:6] == [str(addr["out"] + (8 if i == 3 else 0)), str(addr["bias"]), "0", "0"], words


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
    from tracea.kernels import Op

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
