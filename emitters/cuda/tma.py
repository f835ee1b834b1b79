"""Host side of the Hopper GEMM: TMA tensor maps (``cuTensorMapEncodeTiled`` through cuda-bindings'
driver API, 128B swizzle) and a launch through ``cuLaunchKernel`` with the maps passed by value.

Needs a driver (a GPU machine); importing this module does not. The tensor map is 128 opaque bytes
that the kernel receives as ``const __grid_constant__ TrTensorMap``: it is copied out of the
``CUtensorMap`` into a 64-byte-aligned ctypes buffer and handed to the launch like any other argument.
"""

from __future__ import annotations

import ctypes
from typing import Any

from tracea.doctor.errors import TraceaError

from .wgmma import BK, WgmmaSchedule, tma_boxes

MAP_BYTES = 128


class _Map(ctypes.Structure):
    """The 128 opaque bytes of a CUtensorMap (cuLaunchKernel copies them into the parameter space)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


def _check(result: Any, what: str) -> Any:
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise TraceaError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


def encode_2d(ptr: int, dtype: str, inner: int, outer: int, row_stride_elems: int, box: tuple[int, int]) -> _Map:
    """A tensor map over a row-major ``outer x inner`` 16-bit matrix at ``ptr`` (rows ``row_stride_elems``
    apart), boxes of ``box = (inner, outer)`` elements, 128B swizzle, out-of-bounds elements read as 0."""
    from cuda.bindings import driver as drv

    if (row_stride_elems * 2) % 16 or ptr % 16:
        raise TraceaError(f"TMA needs 16-byte aligned rows (stride {row_stride_elems * 2} B, base {ptr:#x})")
    dt = drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if dtype == "bf16" else \
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    m = _check(drv.cuTensorMapEncodeTiled(
        dt, 2, ptr, [drv.cuuint64_t(inner), drv.cuuint64_t(outer)], [drv.cuuint64_t(row_stride_elems * 2)],
        [drv.cuuint32_t(box[0]), drv.cuuint32_t(box[1])], [drv.cuuint32_t(1), drv.cuuint32_t(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        drv.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    out = _Map()
    ctypes.memmove(ctypes.addressof(out), m.getPtr(), MAP_BYTES)
    return out


def operand_maps(op: Any, sched: WgmmaSchedule, a_ptr: int, b_ptr: int,
                 a_stride: int | None = None, b_stride: int | None = None) -> tuple[_Map, _Map]:
    """The two tensor maps for ``op``'s A and B (row strides default to the dense ones)."""
    boxes = tma_boxes(op, sched)
    maps = []
    for which, ptr, stride in (("a", a_ptr, a_stride), ("b", b_ptr, b_stride)):
        inner, outer = boxes[which]["dims"]
        maps.append(encode_2d(ptr, op.dtype.value, inner, outer, stride or inner, boxes[which]["box"]))
    assert boxes["a"]["box"][0] == BK or not boxes["a"]["kmajor"]
    return maps[0], maps[1]


class Launcher:
    """A loaded ``tr_wgmma_gemm`` cubin, launched with cuLaunchKernel on a given stream."""

    def __init__(self, cubin: bytes, entry: str, smem_bytes: int) -> None:
        from cuda.bindings import driver as drv

        self._drv = drv
        self.module = _check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.func = _check(drv.cuModuleGetFunction(self.module, entry.encode()), "cuModuleGetFunction")
        self.smem_bytes = smem_bytes
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _check(drv.cuFuncSetAttribute(self.func, attr, smem_bytes), "cuFuncSetAttribute")

    def attribute(self, name: str) -> int:
        attr = getattr(self._drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(_check(self._drv.cuFuncGetAttribute(attr, self.func), "cuFuncGetAttribute"))

    def launch(self, grid: int, threads: int, stream: int, args: list[Any]) -> None:
        """``args``: ctypes values in kernel-parameter order (tensor maps, pointers as c_uint64, ...)."""
        keep = list(args)
        ptrs = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(a) for a in keep])
        _check(self._drv.cuLaunchKernel(self.func, grid, 1, 1, threads, 1, 1, self.smem_bytes,
                                        self._drv.CUstream(stream),
                                        ctypes.addressof(ptrs), 0), "cuLaunchKernel")


def gemm_args(tm_a: _Map, tm_b: _Map, c: int, bias: int, residual: int, alpha: float,
              m: int, n: int, k: int) -> list[Any]:
    return [tm_a, tm_b, ctypes.c_uint64(c), ctypes.c_uint64(bias), ctypes.c_uint64(residual),
            ctypes.c_float(alpha), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k)]
