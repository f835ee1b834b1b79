"""The Hopper conv's "im2col" path: the activations of each k step arrive by one TMA bulk copy in im2col
mode instead of being gathered by 128 producer threads (``mainloop.gather_producer``).

An im2col tensor map describes x as the 4-d NHWC tensor it is (dims C, W, H, N, innermost first) with a
bounding box per image: lower corner ``-pad``, upper corner ``pad - dilation x (filter - 1)``, so that
walking it with traversal strides ``stride`` visits exactly the P x Q anchor pixels of the output. One
copy loads ``bm`` consecutive anchors (the tile's output pixels in (n, p, q) order, continuing across
rows and images) starting at the tile's first, each shifted by the k step's filter tap (16-bit offsets
``s x dil_w``, ``r x dil_h``), 64 channels a pixel: a ``bm x 64`` tile with the 128B swizzle, byte for
byte what the 2-d GEMM's TMA writes, so the consumers, split-K and the epilogue are unchanged. With
``chunk`` 32 or 16 (channel counts that boxes of 64 would pad by a quarter or more) a stage takes 2 or 4 boxes
of that many channels (64B or 32B swizzle), from consecutive steps of the walk over taps and channel blocks. Pixels in
the padding, past the last image or channels past C read as zero. The filter arrives by the same 3-d TMA
as on the gather path. One producer thread issues both copies; the full barrier expects its
``expect_tx`` only.
"""

from __future__ import annotations

from typing import Any

from ..render import CudaRenderer
from .conv_schedule import WgmmaConvSchedule
from .mainloop import filter_start

IM2COL_LIB = r"""/* 4-d TMA in im2col mode: bm pixels x 64 channels from anchor (c, w, h, n), shifted by (ow, oh). */
static __device__ __forceinline__ void tr_tma_load_im2col(uint32_t dst, const TrTensorMap* map, int c, int w, int h,
                                                          int n, uint16_t ow, uint16_t oh, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n"
                 :: "r"(dst), "l"((uint64_t)map), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar), "h"(ow), "h"(oh)
                 : "memory");
}
"""


def producer(sched: WgmmaConvSchedule, r: CudaRenderer, a_bytes: int, walk: Any) -> str:
    """The producer warpgroup (``if (wg == 0)``): thread 0 walks the block's tiles (or split-K units: ``walk``,
    the kernel's ``scheduler.TileScheduler``) and,
    per k step, waits for a free stage and issues the activations' im2col copy and the filter's copy."""
    S = sched.stages
    return f"""    if (wg == 0) {{
        {r.asm("setmaxnreg", how="dec", n=sched.register_split()[1])}
        if (tid == 0) {{
            const int PQ = P * Q;
            int s = 0;
            uint32_t phase = 0;
{walk.producer_loop("            ")}
                /* the tile's first output pixel (n, p, q) and its anchor in x */
                const int m0 = tm * {sched.bm}, n0 = m0 / PQ, pq = m0 - n0 * PQ, p0 = pq / Q, q0 = pq - p0 * Q;
                const int h0 = p0 * stride_h - pad_h, w0 = q0 * stride_w - pad_w;
                {filter_start(sched)}
                for ({walk.k_range()}) {{
                    tr_mbar_wait(bars + 8u * ({S} + s), phase ^ 1u);
                    const uint32_t full = bars + 8u * s, sa = smem + s * {sched.stage_bytes}u, sb = sa + {a_bytes}u;
                    tr_mbar_expect_tx(full, {sched.stage_bytes}u);
{_boxes(sched, a_bytes)}
                    if (++s == {S}) {{ s = 0; phase ^= 1u; }}{_advance(sched)}
                }}
            }}
        }}"""


def _boxes(sched: WgmmaConvSchedule, a_bytes: int) -> str:
    """One k step's copies: the activations' im2col box and the filter's box of each of the stage's
    ``chunks_per_step`` (tap, channel block) steps, the walk's counters advanced after each. A stage past the
    walk's last box (an odd count of boxes) takes boxes of channels past every pixel's (``cblk x chunk`` >= Cp) at
    tap (0, 0): TMA fills them with zeros and counts their bytes, so the stage's products add nothing."""
    pad = " " * 20
    per, ch = sched.chunks_per_step, sched.chunk
    if per == 1:  # one box a stage: the counters advance after the stage (``_advance``)
        return (f"{pad}tr_tma_load_im2col(sa, &tmA, cb * {ch}, w0, h0, n0, (uint16_t)(fs * dil_w), "
                f"(uint16_t)(fr * dil_h),\n{pad}                   full);\n"
                f"{pad}tr_tma_load_3d(sb, &tmB, cb * {ch}, fr * S + fs, tn * {sched.bn}, full);")
    c, r = f"(fr < R ? cb : cblk) * {ch}", "(fr < R ? fr : 0)"  # past the walk: channels past Cp at tap (0, 0)
    return "\n".join(
        f"{pad}tr_tma_load_im2col(sa + {j * a_bytes // per}u, &tmA, {c}, w0, h0, n0, (uint16_t)(fs * dil_w), "
        f"(uint16_t)({r} * dil_h), full);\n"
        f"{pad}tr_tma_load_3d(sb + {j * sched.bn * ch * 2}u, &tmB, {c}, {r} * S + fs, tn * {sched.bn}, full);\n"
        f"{pad}if (++cb == cblk) {{ cb = 0; if (++fs == S) {{ fs = 0; ++fr; }} }}" for j in range(per))


def _advance(sched: WgmmaConvSchedule) -> str:
    """After a stage of one box: the walk's counters moved to the next (tap, channel block)."""
    if sched.chunks_per_step != 1:
        return ""
    return "\n                    if (++cb == cblk) { cb = 0; if (++fs == S) { fs = 0; ++fr; } }"


def activation_map(op: Any, sched: WgmmaConvSchedule, x_ptr: int) -> Any:
    """The im2col tensor map over NHWC x at ``x_ptr`` (channel stride Cp, C rounded up to 8); the same op,
    tile height and address give the same map object (tma.cached_map)."""
    from .. import tma

    if x_ptr % 16:
        raise ValueError(f"TMA needs a 16-byte aligned base, not {x_ptr:#x}")
    return tma.cached_map(("im2col", x_ptr, op, sched.bm, sched.chunk, tma.L2_PROMOTION, tma.OFF_LINE_PROMOTION),
                          lambda: _encode_activation(op, sched, x_ptr))


def _encode_activation(op: Any, sched: WgmmaConvSchedule, x_ptr: int) -> Any:
    from cuda.bindings import driver as drv

    from ..tma import MAP_BYTES, _Map, driver_call, l2_promotion

    cp = (op.c + 7) // 8 * 8
    dt = drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if op.dtype.value == "bf16" else \
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    (ph, pw), (sh, sw), (dh, dw) = op.padding, op.stride, op.dilation
    dims = (cp, op.w, op.h, op.n)
    strides = (cp * 2, op.w * cp * 2, op.h * op.w * cp * 2)
    m = driver_call(drv.cuTensorMapEncodeIm2col(
        dt, 4, x_ptr, [drv.cuuint64_t(d) for d in dims], [drv.cuuint64_t(st) for st in strides],
        [-pw, -ph], [pw - dw * (op.s - 1), ph - dh * (op.r - 1)], sched.chunk, sched.bm,
        [drv.cuuint32_t(v) for v in (1, sw, sh, 1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{2 * sched.chunk}B"),
        l2_promotion(drv, *strides),
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeIm2col")
    out = _Map()
    import ctypes

    ctypes.memmove(ctypes.addressof(out), m.getPtr(), MAP_BYTES)
    return out
