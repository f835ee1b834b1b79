"""``tracea doctor --measure``: measured ceilings beside the spec ones.

CPU: ``data/cpu_ceilings.c`` built with the host compiler (FMA throughput, stream triad).
NVIDIA GPU (cuda-bindings + NVRTC): a device-to-device copy (bytes read + written, CUDA events,
median of repeats) and a matrix-unit loop (mma.sync m16n8k16 bf16, verified against a float64
reference on fresh random inputs before it is timed). With torch installed, a cuBLAS bf16 GEMM
8192^3 on random data too, labelled as such.

Each measurement returns ``{"value", "unit", "method"}`` or ``{"error"}``; nothing here raises.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from typing import Any

from .sources.cpu import interpret as interpret_cpu


def _fail(exc: BaseException | str) -> dict[str, Any]:
    return {"error": exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------------------------------------- CPU


def measure_cpu(raw_cpu: dict[str, Any], fma_iters: int = 50_000_000, triad_floats: int = 32 * 1024 * 1024) -> dict[str, Any]:
    return measure_cpu_info(interpret_cpu(raw_cpu), fma_iters, triad_floats)


def measure_cpu_info(cpu: Any, fma_iters: int = 50_000_000, triad_floats: int = 32 * 1024 * 1024) -> dict[str, Any]:
    """``measure_cpu`` from an interpreted ``CpuInfo`` (a report's ``cpu``)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        err = _fail("no C compiler to build the measurement program")
        return {"fp32_flops": err, "memory_bandwidth": err}
    vbytes = max(16, (cpu.vector_width_bits or 128) // 8)
    threads = cpu.logical_cores or os.cpu_count() or 1
    src = resources.files("tracea.doctor").joinpath("data/cpu_ceilings.c").read_text()
    nacc = 16 if cpu.simd_family in ("avx512", "neon") else 12  # 32 vector registers, or 16 (AVX2)
    flags = ["-O3", "-ffp-contract=fast", *(cpu.emitter_flags or []), f"-DVBYTES={vbytes}", f"-DNACC={nacc}", "-pthread"]
    with tempfile.TemporaryDirectory(prefix="tracea-measure-") as tmp:
        c_path, exe = os.path.join(tmp, "cpu_ceilings.c"), os.path.join(tmp, "cpu_ceilings")
        with open(c_path, "w") as f:
            f.write(src)
        build = subprocess.run([cc, *flags, c_path, "-o", exe], capture_output=True, text=True, timeout=120)
        if build.returncode != 0:
            err = _fail(f"build failed: {build.stderr.strip()[:300]}")
            return {"fp32_flops": err, "memory_bandwidth": err}
        run = subprocess.run([exe, str(threads), str(fma_iters), str(triad_floats)],
                             capture_output=True, text=True, timeout=600)
    try:
        out = json.loads(run.stdout)
    except ValueError:
        err = _fail(f"measurement program failed (rc {run.returncode}): {run.stdout[:200]} {run.stderr[:200]}")
        return {"fp32_flops": err, "memory_bandwidth": err}
    triad: dict[str, Any]
    if out.get("triad_mismatches"):
        triad = _fail(f"triad computed wrong values at {out['triad_mismatches']} sampled points")
    else:
        triad = {"value": out["triad_bytes_per_s"], "unit": "B/s",
                 "method": f"stream triad, {threads} threads, 3 x {triad_floats * 4 >> 20} MiB fp32 arrays, best of 5"}
    return {
        "fp32_flops": {
            "value": out["fma_flops"], "unit": "FLOP/s",
            "method": f"FMA loop, {threads} threads x {out['accumulators']} independent {vbytes * 8}-bit accumulators"
                      f" ({os.path.basename(cc)} {' '.join(flags[:-3])}), best of 3",
        },
        "memory_bandwidth": triad,
    }


# ---------------------------------------------------------------------------------------------- GPU

MMA_LOOP = r"""
// One warp = one m16n8k16 bf16 tile; NACC independent accumulators hide the MMA latency.
extern "C" __global__ void mma_loop(const unsigned short* A, const unsigned short* B, float* D, int iters) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // A is 16x16 row-major, B is 16x8 stored k-major; register layouts as in the PTX ISA for m16n8k16.
    #define PACK(lo, hi) ((unsigned)(lo) | ((unsigned)(hi) << 16))
    unsigned a0 = PACK(A[g * 16 + t * 2], A[g * 16 + t * 2 + 1]);
    unsigned a1 = PACK(A[(g + 8) * 16 + t * 2], A[(g + 8) * 16 + t * 2 + 1]);
    unsigned a2 = PACK(A[g * 16 + t * 2 + 8], A[g * 16 + t * 2 + 9]);
    unsigned a3 = PACK(A[(g + 8) * 16 + t * 2 + 8], A[(g + 8) * 16 + t * 2 + 9]);
    unsigned b0 = PACK(B[(t * 2) * 8 + g], B[(t * 2 + 1) * 8 + g]);
    unsigned b1 = PACK(B[(t * 2 + 8) * 8 + g], B[(t * 2 + 9) * 8 + g]);
    float acc[NACC][4];
    #pragma unroll
    for (int j = 0; j < NACC; ++j) { acc[j][0] = 0.f; acc[j][1] = 0.f; acc[j][2] = 0.f; acc[j][3] = 0.f; }
    for (int i = 0; i < iters; ++i) {
        #pragma unroll
        for (int j = 0; j < NACC; ++j) {
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    #pragma unroll
    for (int j = 0; j < NACC; ++j) { s0 += acc[j][0]; s1 += acc[j][1]; s2 += acc[j][2]; s3 += acc[j][3]; }
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    float* out = D + (size_t)warp * 128;   // every warp writes its own tile: all must be right
    out[g * 8 + t * 2] = s0; out[g * 8 + t * 2 + 1] = s1;
    out[(g + 8) * 8 + t * 2] = s2; out[(g + 8) * 8 + t * 2 + 1] = s3;
}
"""
NACC = 8


def _check(result: tuple, what: str) -> Any:
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err}")
    return result[1] if len(result) == 2 else result[1:]


def _bf16_bits(x):
    import numpy as np

    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


def _bf16_value(bits):
    import numpy as np

    return (bits.astype(np.uint32) << 16).view(np.float32)


class _Cuda:
    """A minimal driver-API session: one device, its primary context, events for timing."""

    def __init__(self, ordinal: int, uuid: str | None = None) -> None:
        from cuda.bindings import driver

        self.drv = driver
        _check(driver.cuInit(0), "cuInit")
        if uuid is not None:  # the report's order may be assumed; the UUID is not
            ordinal = self._ordinal_of(uuid, ordinal)
        self.dev = _check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        self.ctx = _check(driver.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.stream = _check(driver.cuStreamCreate(0), "cuStreamCreate")
        self.allocs: list[Any] = []

    def _ordinal_of(self, uuid: str, fallback: int) -> int:
        want = uuid.lower().split("-", 1)[1].replace("-", "") if uuid.lower().startswith(("gpu-", "mig-")) else uuid.lower()
        count = int(_check(self.drv.cuDeviceGetCount(), "cuDeviceGetCount"))
        for i in range(count):
            dev = _check(self.drv.cuDeviceGet(i), "cuDeviceGet")
            got = _check(self.drv.cuDeviceGetUuid(dev), "cuDeviceGetUuid")
            if bytes(got.bytes).hex() == want:
                return i
        return fallback

    def attr(self, name: str) -> int:
        a = getattr(self.drv.CUdevice_attribute, name)
        return int(_check(self.drv.cuDeviceGetAttribute(a, self.dev), name))

    def alloc(self, nbytes: int) -> Any:
        ptr = _check(self.drv.cuMemAlloc(nbytes), "cuMemAlloc")
        self.allocs.append(ptr)
        return ptr

    def time_ms(self, fn, warmup: int, reps: int) -> list[float]:
        d = self.drv
        start = _check(d.cuEventCreate(0), "cuEventCreate")
        stop = _check(d.cuEventCreate(0), "cuEventCreate")
        for _ in range(warmup):
            fn()
        _check((d.cuStreamSynchronize(self.stream)[0], None), "warm-up")
        times = []
        for _ in range(reps):
            _check((d.cuEventRecord(start, self.stream)[0], None), "cuEventRecord")
            fn()
            _check((d.cuEventRecord(stop, self.stream)[0], None), "cuEventRecord")
            _check((d.cuEventSynchronize(stop)[0], None), "cuEventSynchronize")
            times.append(float(_check(d.cuEventElapsedTime(start, stop), "cuEventElapsedTime")))
        d.cuEventDestroy(start)
        d.cuEventDestroy(stop)
        return times

    def close(self) -> None:
        for p in self.allocs:
            self.drv.cuMemFree(p)
        self.drv.cuStreamDestroy(self.stream)
        self.drv.cuDevicePrimaryCtxRelease(self.dev)


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def _p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def measure_copy(cu: _Cuda, nbytes: int = 1 << 30) -> dict[str, Any]:
    d = cu.drv
    src, dst = cu.alloc(nbytes), cu.alloc(nbytes)
    _check((d.cuMemsetD32Async(src, 0x3F9E0651, nbytes // 4, cu.stream)[0], None), "cuMemsetD32")
    times = cu.time_ms(lambda: _check((d.cuMemcpyDtoDAsync(dst, src, nbytes, cu.stream)[0], None), "cuMemcpyDtoD"),
                       warmup=3, reps=20)
    med = _median(times)
    return {"value": 2 * nbytes / (med * 1e-3), "unit": "B/s",
            "method": f"device-to-device copy of {nbytes >> 20} MiB, bytes read + written, CUDA events, "
                      f"median of {len(times)} (p95 {2 * nbytes / (_p95(times) * 1e-3) / 1e12:.2f} TB/s)"}


def compile_mma_cubin(major: int, minor: int) -> bytes:
    """The matrix-unit loop as a cubin for sm_<major><minor>, through NVRTC (no GPU needed)."""
    from cuda.bindings import nvrtc

    if (major, minor) < (8, 0):
        raise RuntimeError(f"bf16 mma.sync needs sm_80 or later (this is sm_{major}{minor})")
    prog = _check(nvrtc.nvrtcCreateProgram(MMA_LOOP.encode(), b"mma_loop.cu", 0, [], []), "nvrtcCreateProgram")
    opts = [f"--gpu-architecture=sm_{major}{minor}".encode(), f"-DNACC={NACC}".encode(), b"-lineinfo"]
    err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    if int(err) != 0:
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC: {log.decode(errors='replace')[:400]}")
    size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
    cubin = b" " * size
    _check((nvrtc.nvrtcGetCUBIN(prog, cubin)[0], None), "nvrtcGetCUBIN")
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin


def _compile_mma(cu: _Cuda) -> Any:
    major = cu.attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
    minor = cu.attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
    cubin = compile_mma_cubin(major, minor)
    module = _check(cu.drv.cuModuleLoadData(cubin), "cuModuleLoadData")
    return _check(cu.drv.cuModuleGetFunction(module, b"mma_loop"), "cuModuleGetFunction")


def measure_mma(cu: _Cuda, iters: int = 16384) -> dict[str, Any]:
    import numpy as np

    d = cu.drv
    fn = _compile_mma(cu)
    sms = cu.attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    blocks, threads = sms * 8, 128
    warps = blocks * threads // 32
    rng = np.random.default_rng()
    a_bits = _bf16_bits(rng.uniform(-1, 1, (16, 16)))
    b_bits = _bf16_bits(rng.uniform(-1, 1, (16, 8)))
    dA, dB, dD = cu.alloc(a_bits.nbytes), cu.alloc(b_bits.nbytes), cu.alloc(warps * 128 * 4)
    _check((d.cuMemcpyHtoD(dA, a_bits, a_bits.nbytes)[0], None), "copy A")
    _check((d.cuMemcpyHtoD(dB, b_bits, b_bits.nbytes)[0], None), "copy B")

    def launch(n: int) -> None:
        args = [np.array([int(dA)], np.uint64), np.array([int(dB)], np.uint64),
                np.array([int(dD)], np.uint64), np.array([n], np.int32)]
        ptrs = np.array([a.ctypes.data for a in args], np.uint64)
        _check((d.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, cu.stream, ptrs.ctypes.data, 0)[0], None),
               "cuLaunchKernel")

    # Verify first: poison the output with NaN, run a short loop, compare every warp's tile.
    check_iters = 64
    _check((d.cuMemsetD32Async(dD, 0x7FC00000, warps * 128, cu.stream)[0], None), "poison")
    launch(check_iters)
    _check((d.cuStreamSynchronize(cu.stream)[0], None), "verify run")
    out = np.empty(warps * 128, np.float32)
    _check((d.cuMemcpyDtoH(out, dD, out.nbytes)[0], None), "copy D")
    ref = NACC * check_iters * (_bf16_value(a_bits).astype(np.float64) @ _bf16_value(b_bits).astype(np.float64))
    tiles = out.reshape(warps, 16, 8).astype(np.float64)
    if not np.isfinite(tiles).all():
        return _fail("mma loop left unwritten (NaN) outputs")
    rel = float(np.linalg.norm(tiles - ref) / (np.linalg.norm(ref) * np.sqrt(warps)))
    if rel > 1e-4:
        return _fail(f"mma loop result wrong: relative error {rel:.2e} against the float64 reference")
    times = cu.time_ms(lambda: launch(iters), warmup=2, reps=10)
    flops = warps * NACC * iters * 16 * 8 * 16 * 2
    med = _median(times)
    return {"value": flops / (med * 1e-3), "unit": "FLOP/s",
            "method": f"mma.sync m16n8k16 bf16 loop, {warps} warps x {NACC} accumulators, verified "
                      f"(rel err {rel:.1e}), CUDA events, median of {len(times)}; mma.sync only, "
                      "not the wgmma peak of Hopper"}


def measure_cublas(ordinal: int, n: int = 8192) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return _fail("torch is not installed")
    if not torch.cuda.is_available():
        return _fail("torch sees no CUDA device")
    dev = torch.device(f"cuda:{ordinal}")
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = a @ b
    ref = (a[:64].double() @ b.double())
    rel = float((c[:64].double() - ref).norm() / ref.norm())
    if not rel < 1e-2:
        return _fail(f"cuBLAS result off: relative error {rel:.2e}")
    times = []
    for i in range(13):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b, out=c)
        stop.record()
        stop.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(stop))
    med = _median(times)
    return {"value": 2 * n**3 / (med * 1e-3), "unit": "FLOP/s",
            "method": f"cuBLAS bf16 GEMM {n}^3 via torch {torch.__version__}, random inputs, verified "
                      f"(rel err {rel:.1e}), CUDA events, median of {len(times)}"}


def measure_gpu_copy(ordinal: int, nbytes: int = 1 << 30) -> dict[str, Any]:
    """``measure_copy`` on device ``ordinal`` in a session of its own: {value, unit, method} or {error}."""
    try:
        cu = _Cuda(ordinal)
    except Exception as exc:  # noqa: BLE001 - no driver, no device: the figure is missing, with why
        return _fail(exc)
    try:
        return measure_copy(cu, nbytes)
    except Exception as exc:  # noqa: BLE001 - out of memory, a failed copy
        return _fail(exc)
    finally:
        cu.close()


def measure_gpu(ordinal: int, uuid: str | None = None) -> dict[str, Any]:
    try:
        cu = _Cuda(ordinal, uuid)
    except Exception as exc:  # noqa: BLE001
        err = _fail(exc)
        return {"memory_bandwidth": err, "bf16_tensor_flops": err}
    results: dict[str, Any] = {}
    try:
        for metric, fn in (("memory_bandwidth", measure_copy), ("bf16_tensor_flops", measure_mma)):
            try:
                results[metric] = fn(cu)
            except Exception as exc:  # noqa: BLE001 - a failing measurement is a recorded result
                results[metric] = _fail(exc)
    finally:
        cu.close()
    results["bf16_gemm_cublas_flops"] = _guarded(measure_cublas, ordinal)
    return results


def _guarded(fn, *args) -> dict[str, Any]:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001
        return _fail(exc)


def measure_all(raw: dict[str, Any]) -> dict[str, Any]:
    """Measured ceilings keyed like the report's: {"cpu": {...}, "cuda:0": {...}}."""
    from .sources.nvidia import interpret as interpret_nvidia

    measured: dict[str, Any] = {"cpu": _guarded(measure_cpu, raw.get("cpu") or {})}
    section = interpret_nvidia(raw.get("nvml"), raw.get("cuda"), raw.get("env") or {})
    for g in section.devices:
        measured[f"cuda:{g.cuda_index}"] = measure_gpu(g.cuda_index or 0, g.uuid)
    return measured
