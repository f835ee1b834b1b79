"""The Hopper implicit-GEMM convolution (``cuda-wgmma.conv2d``, sm_90a, NHWC, bf16/fp16): the Hopper
GEMM's parts (128B-swizzled ring, mbarriers, ``setmaxnreg``, the scheduler's persistent tile order, the
consumer warpgroups' wgmma mainloop and the epilogue, reused as is) with a producer that builds the
activation operand itself (``mainloop.gather_producer``). GEMM_M = N*P*Q (output pixels), GEMM_N = K,
GEMM_K = R*S*C ordered (r, s, c), no im2col buffer.

- **B (the filter, K x R x S x C)** arrives by TMA: a 3-d tensor map (C, R*S, K), one ``{64, 1, bn}``
  box per k step, which lands exactly as the GEMM's K-major ``{64, bn}`` box (a 128-byte line per output
  channel, 128B swizzle). Channels past C are zero-filled by TMA.
- **A (the activations)** is gathered by the producer warpgroup's 128 threads with 16-byte
  ``cp.async.cg`` copies into the same 128B-swizzled ``bm x 64`` layout TMA would have written (the
  address is ``TileLayout.c_offset``, the algebra the bank simulator scores). Thread t owns 16-byte
  chunk t % 8 of lines t / 8 + 16 i; the output pixel (n, p, q) of each of its lines is computed once
  per tile, the input pixel (p * stride - pad + r * dil, ...) per k step; a pixel outside the image, a
  line past M or channels past C copy 0 bytes (``src-size`` 0: zero fill), so padding, stride,
  dilation and edge tiles need no other code.
- **Completion** (``publish``). Writes by ``cp.async`` are generic-proxy writes and wgmma reads shared
  memory through the async proxy. "wait": each producer thread commits one cp.async group per k step,
  waits (``cp.async.wait_group LAG``) for the group ``LAG`` steps back, issues
  ``fence.proxy.async.shared::cta`` and arrives on that stage's full barrier; ``LAG = min(2, stages -
  2)`` keeps copies in flight without deadlock (the consumers release a stage only after the next one
  is full). "noinc" (the hero for K > 128): ``cp.async.mbarrier.arrive.noinc`` makes the arrival when
  the thread's copies land, so the producer never blocks on its own copies, and each consumer thread
  fences the proxy after its full-barrier wait. Either way the full barrier expects 129 arrivals (128
  producer threads and the TMA's ``expect_tx``). On the H200, N32 C256 56x56: 0.76x cuDNN with "wait",
  0.81x with "noinc" (docs/device-runs/h200-cuda-kernels-and-tuner/wgmma_conv/nchw-transposes-memcheck).
- **C not a multiple of 8** (a pixel's channels are not 16-byte aligned, and TMA needs 16-byte strides):
  the host copies x and the filter into buffers whose channel stride is rounded up to 8 (zeroed once;
  ``cuMemcpy2DAsync`` at every launch, inside the timed call), and the kernel reads those.
- The output (N x P x Q x K) is the GEMM's row-major C, so the GEMM's epilogue runs unchanged (bias per
  output channel; direct stores or the TMA-store epilogue when K is a multiple of 8).

NCHW runs the same kernel over transposed copies, **inside every timed call**: x (N, C, H*W) to
(N, H*W, Cp), the filter (K, C, R*S) to (K, R*S, Cp), and the NHWC result back to (N, K, P*Q), by a
32 x 32 shared-memory transpose kernel (``tr_transpose16``, in the same source). Those three passes over
memory are part of the NCHW figure; NHWC is the layout this kernel is for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...cstyle import CodeWriter
from ..render import CudaRenderer, Rendered
from . import conv1x1, im2col, scheduler
from .conv_schedule import WgmmaConvSchedule, channels_padded
from .epilogue import Stores
from .mainloop import consumer_branch, gather_producer, kernel_head, operand_layouts
from .ptx import DEVICE_LIB, GATHER_LIB, PTX_TYPE, swizzled_desc_lib, wgmma_instruction
from .schedule import BK, ELEM_BYTES

KERNEL_NAME = "tr_wgmma_conv"
INT_PARAMS = ("M", "N", "Cp", "H", "W", "P", "Q", "R", "S", "stride_h", "stride_w", "pad_h", "pad_w",
              "dil_h", "dil_w", "cblk", "store_tma")


def conv_scalars(op: Any, chunk: int = BK) -> dict[str, int]:
    """The kernel's integer arguments for ``op`` (``INT_PARAMS`` but ``store_tma``, which the host sets); ``cblk``:
    the schedule's boxes of ``chunk`` channels a filter tap."""
    cp = channels_padded(op)
    return {"M": op.gemm_m, "N": op.k, "Cp": cp, "H": op.h, "W": op.w, "P": op.p, "Q": op.q, "R": op.r,
            "S": op.s, "stride_h": op.stride[0], "stride_w": op.stride[1], "pad_h": op.padding[0],
            "pad_w": op.padding[1], "dil_h": op.dilation[0], "dil_w": op.dilation[1], "cblk": -(-cp // chunk)}


def render(op: Any, sched: WgmmaConvSchedule) -> str:
    """CUDA C++ (no headers; NVRTC ``-arch=sm_90a``) of ``extern "C" tr_wgmma_conv``. Parameters:
    ``(tmB, tmC, const uint16_t* X, uint16_t* C, const uint16_t* bias, int M, N, Cp, H, W, P, Q, R, S,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, cblk, store_tma)``; X is NHWC with channel stride Cp.
    A "gemm"-path schedule (1x1 convs) renders the GEMM's kernel instead (``conv1x1``)."""
    if sched.path == "gemm":
        return conv1x1.render(op, sched)
    sched.validate(op)
    dtype = op.dtype.value
    r = CudaRenderer()
    a_bytes = sched.bm * BK * ELEM_BYTES
    w = CodeWriter()
    w(f"/* cuda-wgmma.conv2d {sched.name}: {dtype}, NHWC, implicit GEMM, bias {'yes' if op.bias else 'no'} */")
    w.extend(r.prelude(1))
    w.extend(DEVICE_LIB)
    w.extend(GATHER_LIB)
    tma_a = sched.path == "im2col"
    if tma_a:
        w.extend(im2col.IM2COL_LIB)
    if sched.chunk != BK:
        w.extend(swizzled_desc_lib(2 * sched.chunk))
    w.extend(wgmma_instruction(sched.bn, PTX_TYPE[dtype], 0, 0))
    walk = scheduler.TileScheduler(sched)
    for fn in walk.functions():
        w.extend(fn)
    w(f'extern "C" __global__ void __launch_bounds__({sched.threads}, 1) {KERNEL_NAME}(')
    w(("    const __grid_constant__ TrTensorMap tmA," if tma_a else "    ")
      + "const __grid_constant__ TrTensorMap tmB, const __grid_constant__ TrTensorMap tmC,")
    w("    const uint16_t* __restrict__ X, uint16_t* __restrict__ C, const uint16_t* __restrict__ bias,")
    w("    int M, int N, int Cp, int H, int W, int P, int Q, int R, int S, int stride_h, int stride_w,")
    w(f"    int pad_h, int pad_w, int dil_h, int dil_w, int cblk, int store_tma{walk.signature()}) {{")
    # the kernel joins its parts (as the GEMM does): the scheduler's walk, a producer, the consumers, the stores
    w.extend(kernel_head(sched, r, a_bytes, walk, k_iters=_k_iters(sched), maps=("tmA", "tmB") if tma_a else ("tmB",),
                         full_arrivals=1 if tma_a else 129))
    w.extend(im2col.producer(sched, r, a_bytes, walk) if tma_a else gather_producer(sched, r, walk))
    stores = Stores(sched, r, dtype, ("bias",) if op.bias else ())
    w.extend(consumer_branch(sched, r, walk, stores, proxy_fence=not tma_a and sched.publish == "noinc"))
    if op.layout == "nchw":
        w.extend(TRANSPOSE)
    return w.render()


def _k_iters(sched: WgmmaConvSchedule) -> str:
    """The C expression of a tile's ring stages: taps x channel blocks, ``chunks_per_step`` boxes a stage."""
    per = sched.chunks_per_step
    return "R * S * cblk" if per == 1 else f"(R * S * cblk + {per - 1}) / {per}"


TRANSPOSE = r"""/* dst[b][c][r] = src[b][r][c] for a batch of R x C 16-bit matrices; dst rows ldd apart (>= R).
   NCHW <-> NHWC around the conv kernel. Grid (ceil(C/32), ceil(R/32), batches), block (32, 8). */
extern "C" __global__ void __launch_bounds__(256) tr_transpose16(const uint16_t* __restrict__ src,
                                                                 uint16_t* __restrict__ dst, int R, int C, int ldd) {
    __shared__ uint16_t t[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    src += (int64_t)blockIdx.z * R * C;
    dst += (int64_t)blockIdx.z * C * ldd;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < R && c < C) t[i][threadIdx.x] = src[(int64_t)r * C + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int c = c0 + i, r = r0 + threadIdx.x;
        if (r < R && c < C) dst[(int64_t)c * ldd + r] = t[threadIdx.x][i];
    }
}
"""


def launch_geometry(op: Any, sched: WgmmaConvSchedule, sm_count: int) -> tuple[int, int, int]:
    """(grid blocks, threads per block, dynamic shared memory bytes) over the implicit GEMM's
    GEMM_M x K tiles (``scheduler.launch_geometry``), or its split-K work units."""
    return scheduler.launch_geometry(sched, op.gemm_m, op.k, sm_count, None, split_plan(op, sched, sm_count))


def split_plan(op: Any, sched: WgmmaConvSchedule, sm_count: int) -> scheduler.Plan:
    return scheduler.TileScheduler(sched).plan(op.gemm_m, op.k, sched.k_steps(op), sm_count)


def rendered(op: Any, sched: WgmmaConvSchedule, sm_count: int) -> Any:
    """The CUDA emitter's ``Rendered`` (source, launch geometry, metadata) for ``op``; the GEMM's own for
    a "gemm"-path schedule (``conv1x1.rendered``)."""
    if sched.path == "gemm":
        return conv1x1.rendered(op, sched, sm_count)
    src = render(op, sched)
    grid, threads, smem = launch_geometry(op, sched, sm_count)
    a_lay, b_lay = operand_layouts(sched.bm, True, sched.chunk), operand_layouts(sched.bn, True, sched.chunk)
    cp, swizzle = channels_padded(op), f"{2 * sched.chunk}B swizzle"
    boxes = "" if sched.chunk == BK else f", {sched.chunks_per_step} boxes of {sched.chunk} channels a stage"
    b_smem = [f"{sched.bn}x{BK}x2B row-major, swizzle 128B"] if sched.chunk == BK else [t.describe() for t in b_lay]
    meta = {
        "name": f"tr_{sched.name}",
        "tile": {"M": sched.bm, "N": sched.bn, "K": BK, "stages": sched.stages, "consumers": sched.consumers,
                 "pingpong": sched.pingpong},
        "fragments": {"mma": f"wgmma.mma_async m64n{sched.bn}k16", "dtype_in": op.dtype.value, "dtype_acc": "fp32",
                      "load": (f"A: TMA cp.async.bulk.tensor.4d im2col, {swizzle}; " if sched.path == "im2col" else
                               "A: cp.async.cg gather (zero fill) into the 128B swizzle, fence.proxy.async, mbarrier; ")
                              + ("B: TMA cp.async.bulk.tensor.3d" if sched.chunk == BK else
                                 f"B: TMA cp.async.bulk.tensor.3d, {swizzle}{boxes}")},
        "smem": {"a": [t.describe() for t in a_lay], "b": b_smem,
                 "stage_bytes": sched.stage_bytes},
        "registers": dict(zip(("entry", "producer", "consumer"), sched.register_split(), strict=True)),
        "launch": {"grid": [grid, 1, 1], "block": [threads, 1, 1], "dynamic_smem": smem,
                   "persistent": sched.persistent},
        "epilogue": ["bias"] if op.bias else [],
        "implicit_gemm": {"M": op.gemm_m, "N": op.gemm_n, "K": op.gemm_k, "k_order": "r, s, c"},
        "channel_padding": None if cp == op.c else
        f"C = {op.c} is padded to {cp} (16-byte pixels) by a copy of x and the filter inside every launch",
        "layout_transform": None if op.layout == "nhwc" else
        "NCHW: x and the filter transposed to NHWC before, the result back to NCHW after, inside every launch",
    }
    params = ("tmA",) * (sched.path == "im2col") + ("tmB", "tmC", "x", "out", "bias", *INT_PARAMS)
    if sched.split != 1:
        meta["split_k"] = split_plan(op, sched, sm_count).to_json()
        params += scheduler.TileScheduler(sched).params()
    return Rendered(f"tr_{sched.name}", KERNEL_NAME, src, params, (grid, 1, 1), (threads, 1, 1), smem, meta)


# ------------------------------------------------------------------------------- host side (GPU only)


def filter_map(op: Any, sched: WgmmaConvSchedule, w_ptr: int) -> Any:
    """The filter (K x R x S x Cp) as a 3-d tensor map (Cp, R*S, K), ``{chunk, 1, bn}`` boxes (``64 / chunk`` a k
    step) with the swizzle of their ``2 chunk``-byte lines."""
    from ..tma import encode_tiled

    cp = channels_padded(op)
    return encode_tiled(w_ptr, op.dtype.value, (cp, op.r * op.s, op.k), (cp * 2, op.r * op.s * cp * 2),
                        (sched.chunk, 1, sched.bn), f"{2 * sched.chunk}B")


def nhwc_inputs(op: Any, drv: Any, ptrs: dict[str, int], zeroed: Callable[[str, int], Any]) -> tuple[list, dict]:
    """(steps before the conv, the pointers it reads) for x and the filter at ``ptrs``: when C % 8 != 0 or
    the layout is NCHW, a (batch, rows, Cp) buffer from ``zeroed(name, bytes)`` (its channel padding zeroed
    when it is made), filled at every launch by a ("c", memcpy2d) copy or a ("t", ...) transpose."""
    from ..tma import copy_2d

    cp, steps, out = channels_padded(op), [], dict(ptrs)
    for name in ("x", "weight"):
        batch, rows = (op.n, op.h * op.w) if name == "x" else (op.k, op.r * op.s)
        if cp == op.c and op.layout != "nchw":
            continue
        buf = zeroed(f"{name}_nhwc", batch * rows * cp * 2)
        if op.layout == "nchw":  # (batch, C, rows) -> (batch, rows, Cp)
            steps.append(("t", ptrs[name], int(buf.ptr), op.c, rows, cp, batch))
        else:
            steps.append(("c", copy_2d(drv, ptrs[name], op.c * 2, int(buf.ptr), cp * 2, op.c * 2, batch * rows)))
        out[name] = int(buf.ptr)
    return steps, out


def run_steps(drv: Any, transpose: Callable[[], Any], steps: list[Any], stream: Any) -> None:
    """The copies and ``tr_transpose16`` launches (``transpose()``: its function) of ``nhwc_inputs``
    (and of the NCHW result), in order."""
    import ctypes

    from .. import launches

    for step in steps:
        if step[0] == "c":
            launches.memcpy2d(step[1], stream)
            continue
        _, src, dst, rows, cols, ldd, batch = step
        args = [ctypes.c_uint64(src), ctypes.c_uint64(dst), ctypes.c_int(rows), ctypes.c_int(cols), ctypes.c_int(ldd)]
        launches.kernel(transpose(), (-(-cols // 32), -(-rows // 32), batch), (32, 8, 1), 0, stream, args)


def kernel_args(op: Any, kernel: Any, ptrs: dict[str, int], out: int, bias: int) -> list[Any]:
    """The conv kernel's arguments in order: the activations' tensor map (im2col path), the filter's and C's,
    x, C and the bias as pointers, the integer parameters, split-K's workspace and semaphores."""
    import ctypes

    from ..tma import c_output_map, split_args

    mc, store_tma = c_output_map(op.gemm_m, op.k, op.dtype.value, kernel.schedule, out)
    ints = {**conv_scalars(op, kernel.schedule.chunk), "store_tma": store_tma}
    first = [im2col.activation_map(op, kernel.schedule, ptrs["x"])] if kernel.schedule.path == "im2col" else []
    return [*first, filter_map(op, kernel.schedule, ptrs["weight"]), mc, ctypes.c_uint64(ptrs["x"]),
            ctypes.c_uint64(out), ctypes.c_uint64(bias), *[ctypes.c_int(ints[k]) for k in INT_PARAMS],
            *split_args(kernel, kernel.rendered)]


def conv_kernel(op: Any, artifact: Any, rendered_: Any, scalars: dict[str, Any]) -> Any:
    """The CUDA emitter's kernel object for cuda-wgmma.conv2d (``WgmmaConvKernel``; cuda-core is imported
    only here, so rendering and compiling need no driver); a "gemm"-path schedule's is the GEMM's launch
    over the conv's buffers (``conv1x1.gemm_view_kernel``)."""
    if WgmmaConvSchedule.from_json(artifact.schedule).path == "gemm":
        return conv1x1.gemm_view_kernel(op, artifact, rendered_, scalars)
    from pathlib import Path

    from tracea.doctor.errors import LaunchError

    from ..runtime import CudaKernel
    from ..tma import Launcher, driver_call

    class WgmmaConvKernel(CudaKernel):
        """Buffers, timing and verification as for every CUDA kernel; the launch passes the filter and
        output tensor maps by value. First, when C % 8 != 0 or the layout is NCHW, x and the filter are
        copied (padded, or transposed) into NHWC buffers; after it, an NCHW result is transposed back."""

        def __init__(self) -> None:
            super().__init__(op, artifact, rendered_, scalars)
            self.schedule = WgmmaConvSchedule.from_json(artifact.schedule)
            self._launcher = Launcher(Path(artifact.binary).read_bytes(), rendered_.entry, rendered_.smem)
            self._wargs: list[Any] | None = None
            self._copies: list[Any] = []  # before the conv: ("c", memcpy2d) or ("t", transpose arguments)
            self._after: list[Any] = []  # after it: the NHWC -> NCHW transpose of the result
            self._transpose: Any = None

        def upload(self, inputs: dict[str, Any]) -> None:
            super().upload(inputs)
            ptrs = {name: int(self._dbuf[name].ptr) for name in ("x", "weight")}
            self._copies, ptrs = nhwc_inputs(op, self._dev.driver, ptrs, self._zeroed)
            out = int(self._dbuf["out"].ptr)
            self._after = []
            if op.layout == "nchw":  # the kernel writes NHWC here; a transpose gives (N, K, P*Q)
                tmp = int(self._buffer("out_nhwc", op.gemm_m * op.k * 2).ptr)
                self._after.append(("t", tmp, out, op.p * op.q, op.k, op.p * op.q, op.n))
                out = tmp
            bias = int(self._dbuf["bias"].ptr) if "bias" in self._dbuf else 0
            self._wargs = kernel_args(op, self, ptrs, out, bias)

        def _transpose_function(self) -> Any:
            if self._transpose is None:
                self._transpose = driver_call(self._dev.driver.cuModuleGetFunction(
                    self._launcher.module, b"tr_transpose16"), "cuModuleGetFunction")
            return self._transpose

        def launch(self) -> None:
            if self._wargs is None:
                raise LaunchError("cuda-wgmma.conv2d: launch before upload (no tensor maps yet)")
            stream = self._dev.stream.handle
            run_steps(self._dev.driver, self._transpose_function, self._copies, stream)
            self._launcher.launch(self.rendered.grid[0], self.rendered.block[0], stream, self._wargs)
            run_steps(self._dev.driver, self._transpose_function, self._after, stream)

    return WgmmaConvKernel()
