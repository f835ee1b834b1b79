"""The Hopper implicit-GEMM convolution (``cuda-wgmma.conv2d``, sm_90a, NHWC, bf16/fp16): the Hopper
GEMM's machinery (``wgmma.py``: 128B-swizzled ring, mbarriers, ``setmaxnreg``, persistent tile order,
the consumer warpgroups' wgmma mainloop and epilogue, reused as is) with a producer that builds the
activation operand itself. GEMM_M = N*P*Q (output pixels), GEMM_N = K, GEMM_K = R*S*C ordered (r, s, c),
no im2col buffer.

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
  0.81x with "noinc" (gpu/wgmma_conv/runs/run3).
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

import types
from typing import Any

from ..cstyle import CodeWriter
from ..layout import TileLayout
from .hopper.schedule import (  # noqa: F401 - re-read here until the kernel moves into hopper/
    BK,
    ELEM_BYTES,
    PTX_TYPE,
    SWIZZLE,
    WgmmaConvSchedule,
)
from .hopper.schedule import conv_hero_schedule as hero_schedule  # noqa: F401
from .hopper.schedule import conv_search_space as search_space  # noqa: F401
from .render import CudaRenderer
from .wgmma import DEVICE_LIB, _tile_order, _wgmma_function, consumer_branch, kernel_head

KERNEL_NAME = "tr_wgmma_conv"

CONV_LIB = r"""static __device__ __forceinline__ void tr_tma_load_3d(uint32_t dst, const TrTensorMap* map, int c0, int c1,
                                                      int c2, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
/* 16 bytes global -> shared, bypassing L1; src_bytes 0 writes 16 zero bytes (padding, edges). */
static __device__ __forceinline__ void tr_cp_async_16(uint32_t dst, const void* src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
"""


def channels_padded(op: Any) -> int:
    """The channel stride the kernel reads: C rounded up to 8 (16 bytes, TMA's and cp.async's unit)."""
    return (op.c + 7) // 8 * 8


def conv_scalars(op: Any) -> dict[str, int]:
    cp = channels_padded(op)
    return {"M": op.gemm_m, "N": op.k, "Cp": cp, "H": op.h, "W": op.w, "P": op.p, "Q": op.q, "R": op.r,
            "S": op.s, "stride_h": op.stride[0], "stride_w": op.stride[1], "pad_h": op.padding[0],
            "pad_w": op.padding[1], "dil_h": op.dilation[0], "dil_w": op.dilation[1], "cblk": -(-cp // BK)}


INT_PARAMS = ("M", "N", "Cp", "H", "W", "P", "Q", "R", "S", "stride_h", "stride_w", "pad_h", "pad_w",
              "dil_h", "dil_w", "cblk", "store_tma")


def render(op: Any, sched: WgmmaConvSchedule) -> str:
    """CUDA C++ (no headers; NVRTC ``-arch=sm_90a``) of ``extern "C" tr_wgmma_conv``. Parameters:
    ``(tmB, tmC, const uint16_t* X, uint16_t* C, const uint16_t* bias, int M, N, Cp, H, W, P, Q, R, S,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, cblk, store_tma)``; X is NHWC with channel stride Cp."""
    sched.validate(op)
    dtype = op.dtype.value
    r = CudaRenderer()
    a_lay = TileLayout(sched.bm, BK, ELEM_BYTES, "row", swizzle=SWIZZLE)
    a_bytes, b_bytes = a_lay.size_bytes, sched.bn * BK * ELEM_BYTES
    S, lines = sched.stages, sched.lines_per_thread
    gemm_like = types.SimpleNamespace(dtype=op.dtype, epilogue=("bias",) if op.bias else ())

    w = CodeWriter()
    w(f"/* cuda-wgmma.conv2d {sched.name}: {dtype}, NHWC, implicit GEMM, bias {'yes' if op.bias else 'no'} */")
    w.extend(r.prelude(1))
    w.extend(DEVICE_LIB)
    w.extend(CONV_LIB)
    w.extend(_wgmma_function(sched.bn, PTX_TYPE[dtype], 0, 0))
    w.extend(_tile_order(sched))
    w(f'extern "C" __global__ void __launch_bounds__({sched.threads}, 1) {KERNEL_NAME}(')
    w("    const __grid_constant__ TrTensorMap tmB, const __grid_constant__ TrTensorMap tmC,")
    w("    const uint16_t* __restrict__ X, uint16_t* __restrict__ C, const uint16_t* __restrict__ bias,")
    w("    int M, int N, int Cp, int H, int W, int P, int Q, int R, int S, int stride_h, int stride_w,")
    w("    int pad_h, int pad_w, int dil_h, int dil_w, int cblk, int store_tma) {")
    w.extend(kernel_head(sched, a_bytes, k_iters="R * S * cblk", maps=("tmB",), full_arrivals=129))
    w.extend(f"""    if (wg == 0) {{
        asm volatile("setmaxnreg.dec.sync.aligned.u32 {sched.register_split()[1]};\\n");
        /* This thread's 16-byte chunk of every line, and its first line of the tile. */
        const int chunk = tid % 8, line0 = tid / 8, PQ = P * Q;
        int s = 0;
        uint32_t phase = 0;
        long long step = 0;
        for (int tile = cluster_id; tile < tiles; tile += clusters) {{
            int tm, tn;
            tr_tile_coords(tile, tiles_mc, tiles_n, tm, tn);
            int nh[{lines}], h0[{lines}], w0[{lines}];
            #pragma unroll
            for (int i = 0; i < {lines}; ++i) {{
                const int m = tm * {sched.bm} + line0 + 16 * i;
                const int n = m / PQ, pq = m - n * PQ, p = pq / Q, q = pq - p * Q;
                nh[i] = n * H;
                h0[i] = m < M ? p * stride_h - pad_h : -(1 << 30);  /* a line past M reads nothing */
                w0[i] = q * stride_w - pad_w;
            }}
            int fr = 0, fs = 0, cb = 0;  /* this k step's filter row, column and 64-channel block */
            for (int kk = 0; kk < k_iters; ++kk) {{
                tr_mbar_wait(bars + 8u * ({S} + s), phase ^ 1u);
                const uint32_t full = bars + 8u * s, sa = smem + s * {sched.stage_bytes}u, sb = sa + {a_bytes}u;
                if (tid == 0) {{
                    tr_mbar_expect_tx(full, {b_bytes}u);
                    tr_tma_load_3d(sb, &tmB, cb * {BK}, fr * S + fs, tn * {sched.bn}, full);
                }}
                const int col = cb * {BK} + chunk * 8, dh = fr * dil_h, dw = fs * dil_w;
                #pragma unroll
                for (int i = 0; i < {lines}; ++i) {{
                    const int line = line0 + 16 * i, h = h0[i] + dh, x = w0[i] + dw;
                    const bool ok = (unsigned)h < (unsigned)H && (unsigned)x < (unsigned)W && col < Cp;
                    const uint16_t* src = ok ? X + ((int64_t)(nh[i] + h) * W + x) * Cp + col : X;
                    tr_cp_async_16(sa + {a_lay.c_offset("line", "chunk * 8")}, src, ok ? 16u : 0u);
                }}
                {_publish(sched)}
                ++step;
                if (++s == {S}) {{ s = 0; phase ^= 1u; }}
                if (++cb == cblk) {{ cb = 0; if (++fs == S) {{ fs = 0; ++fr; }} }}
            }}
        }}
        {_drain(sched)}""")
    w.extend(consumer_branch(gemm_like, sched, r, proxy_fence=sched.publish == "noinc"))
    if op.layout == "nchw":
        w.extend(TRANSPOSE)
    return w.render()


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


def _publish(sched: WgmmaConvSchedule) -> str:
    """After a k step's copies are issued: hand a full stage to the consumers (see ``publish``)."""
    if sched.publish == "noinc":  # one of the barrier's 128 expected arrivals, when this thread's copies land
        return 'asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\\n" :: "r"(full) : "memory");'
    S, lag = sched.stages, sched.lag
    return f"""asm volatile("cp.async.commit_group;\\n" ::: "memory");
                if (step >= {lag}) {{  /* publish the stage filled {lag} steps ago */
                    asm volatile("cp.async.wait_group {lag};\\n" ::: "memory");
                    asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
                    tr_mbar_arrive(bars + 8u * ((s + {S - lag}) % {S}));
                }}"""


def _drain(sched: WgmmaConvSchedule) -> str:
    """After the last tile: every copy landed (and, for "wait", the last ``lag`` stages published)."""
    if sched.publish == "noinc":
        return 'asm volatile("cp.async.wait_all;\\n" ::: "memory");'
    S, lag = sched.stages, sched.lag
    return f"""/* the last {lag} stages: wait for every copy, publish them */
        asm volatile("cp.async.wait_all;\\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
        for (int d = {lag}; d >= 1; --d)
            if (step >= d) tr_mbar_arrive(bars + 8u * ((s + {S} - d) % {S}));"""


def launch_geometry(op: Any, sched: WgmmaConvSchedule, sm_count: int) -> tuple[int, int, int]:
    tiles = -(-op.gemm_m // sched.bm) * -(-op.k // sched.bn)
    grid = min(tiles, sm_count) if sched.persistent else tiles
    return grid, sched.threads, sched.smem_bytes


def rendered(op: Any, sched: WgmmaConvSchedule, sm_count: int) -> Any:
    """The CUDA emitter's ``Rendered`` (source, launch geometry, metadata) for ``op``."""
    from .render import Rendered

    src = render(op, sched)
    grid, threads, smem = launch_geometry(op, sched, sm_count)
    a_lay = TileLayout(sched.bm, BK, ELEM_BYTES, "row", swizzle=SWIZZLE)
    cp = channels_padded(op)
    meta = {
        "name": f"tr_{sched.name}",
        "tile": {"M": sched.bm, "N": sched.bn, "K": BK, "stages": sched.stages, "consumers": sched.consumers,
                 "pingpong": sched.pingpong},
        "fragments": {"mma": f"wgmma.mma_async m64n{sched.bn}k16", "dtype_in": op.dtype.value, "dtype_acc": "fp32",
                      "load": "A: cp.async.cg gather (zero fill) into the 128B swizzle, fence.proxy.async, mbarrier; "
                              "B: TMA cp.async.bulk.tensor.3d"},
        "smem": {"a": [a_lay.describe()], "b": [f"{sched.bn}x{BK}x2B row-major, swizzle 128B"],
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
    params = ("tmB", "tmC", "x", "out", "bias", *INT_PARAMS)
    return Rendered(f"tr_{sched.name}", KERNEL_NAME, src, params, (grid, 1, 1), (threads, 1, 1), smem, meta)


# ------------------------------------------------------------------------------- host side (GPU only)


def filter_map(op: Any, sched: WgmmaConvSchedule, w_ptr: int) -> Any:
    """The filter (K x R x S x Cp) as a 3-d tensor map (Cp, R*S, K), one ``{64, 1, bn}`` box per k step."""
    from .tma import encode_tiled

    cp = channels_padded(op)
    return encode_tiled(w_ptr, op.dtype.value, (cp, op.r * op.s, op.k), (cp * 2, op.r * op.s * cp * 2),
                        (BK, 1, sched.bn))


def conv_kernel(op: Any, artifact: Any, rendered_: Any, scalars: dict[str, Any]) -> Any:
    """The CUDA emitter's kernel object for cuda-wgmma.conv2d (``WgmmaConvKernel``; cuda-core is imported
    only here, so rendering and compiling need no driver)."""
    import ctypes
    from pathlib import Path

    from tracea.doctor.errors import LaunchError

    from .runtime import CudaKernel
    from .tma import Launcher, _check, _copy_2d, output_map

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
            drv = self._dev.driver
            cp, self._copies, ptrs = channels_padded(op), [], {}
            nchw = op.layout == "nchw"
            for name in ("x", "weight"):
                ptr = int(self._dbuf[name].ptr)
                batch, rows = (op.n, op.h * op.w) if name == "x" else (op.k, op.r * op.s)
                if cp != op.c or nchw:  # a (batch, rows, Cp) copy, its channel padding zeroed once
                    buf = self._buffer(f"{name}_nhwc", batch * rows * cp * 2)
                    _check(drv.cuMemsetD8(buf.ptr, 0, batch * rows * cp * 2), "cuMemsetD8")
                    if nchw:  # (batch, C, rows) -> (batch, rows, Cp)
                        self._copies.append(("t", ptr, int(buf.ptr), op.c, rows, cp, batch))
                    else:
                        self._copies.append(("c", _copy_2d(drv, ptr, op.c * 2, int(buf.ptr), cp * 2, op.c * 2,
                                                           batch * rows)))
                    ptr = int(buf.ptr)
                ptrs[name] = ptr
            out = int(self._dbuf["out"].ptr)
            self._after = []
            if nchw:  # the kernel writes NHWC here; a transpose gives (N, K, P*Q)
                tmp = int(self._buffer("out_nhwc", op.gemm_m * op.k * 2).ptr)
                self._after.append(("t", tmp, out, op.p * op.q, op.k, op.p * op.q, op.n))
                out = tmp
            gemm_view = types.SimpleNamespace(n=op.k, m=op.gemm_m, dtype=op.dtype)
            mc, store_tma = output_map(gemm_view, self.schedule, out)
            bias = int(self._dbuf["bias"].ptr) if "bias" in self._dbuf else 0
            ints = {**conv_scalars(op), "store_tma": store_tma}
            self._wargs = [filter_map(op, self.schedule, ptrs["weight"]), mc, ctypes.c_uint64(ptrs["x"]),
                           ctypes.c_uint64(out), ctypes.c_uint64(bias), *[ctypes.c_int(ints[k]) for k in INT_PARAMS]]

        def _run(self, steps: list[Any], stream: Any) -> None:
            drv = self._dev.driver
            for step in steps:
                if step[0] == "c":
                    _check(drv.cuMemcpy2DAsync(step[1], stream), "cuMemcpy2DAsync")
                    continue
                _, src, dst, rows, cols, ldd, batch = step
                if self._transpose is None:
                    self._transpose = _check(drv.cuModuleGetFunction(self._launcher.module, b"tr_transpose16"),
                                             "cuModuleGetFunction")
                args = [ctypes.c_uint64(src), ctypes.c_uint64(dst), ctypes.c_int(rows), ctypes.c_int(cols),
                        ctypes.c_int(ldd)]
                ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
                _check(drv.cuLaunchKernel(self._transpose, -(-cols // 32), -(-rows // 32), batch, 32, 8, 1, 0,
                                          stream, ctypes.addressof(ptrs), 0), "cuLaunchKernel (transpose)")

        def launch(self) -> None:
            if self._wargs is None:
                raise LaunchError("cuda-wgmma.conv2d: launch before upload (no tensor maps yet)")
            stream = self._dev.stream.handle
            cu_stream = stream if isinstance(stream, self._dev.driver.CUstream) else self._dev.driver.CUstream(stream)
            self._run(self._copies, cu_stream)
            self._launcher.launch(self.rendered.grid[0], self.rendered.block[0], stream, self._wargs)
            self._run(self._after, cu_stream)

    return WgmmaConvKernel()
