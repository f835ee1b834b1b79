"""Host side of the Hopper GEMM: TMA tensor maps (``cuTensorMapEncodeTiled`` through cuda-bindings'
driver API, 128B swizzle), a launch through ``cuLaunchKernel`` (launches.py) with the maps passed by value, and the
CUDA emitter's hooks for the ``cuda-wgmma`` family (``check_wgmma``, ``WgmmaKernel``).

Needs a driver (a GPU machine); importing this module does not. The tensor map is 128 opaque bytes
that the kernel receives as ``const __grid_constant__ TrTensorMap``: it is copied out of the
``CUtensorMap`` into a 64-byte-aligned ctypes buffer and handed to the launch like any other argument.
"""

from __future__ import annotations

import collections
import ctypes
import threading
from typing import Any

from tracea.doctor.errors import BadInputError, LaunchError, TraceaError, UnsupportedError

from . import modules
from .hopper.gemm import kernel_op, launch_geometry, tma_boxes, tma_unsupported
from .hopper.schedule import BK, WgmmaSchedule
from .hopper.splitk import spread_blocks
from .runtime import CudaKernel

MAP_BYTES = 128


class _Map(ctypes.Structure):
    """The 128 opaque bytes of a CUtensorMap (cuLaunchKernel copies them into the parameter space)."""

    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


def driver_call(result: Any, what: str) -> Any:
    """The value of a cuda-bindings driver call's ``(error, value...)`` result; a ``TraceaError`` naming
    ``what`` when the error is not CUDA_SUCCESS."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise TraceaError(f"{what} failed: {err}")
    return rest[0] if len(rest) == 1 else rest


_MAPS_LOCK = threading.Lock()
_MAPS: collections.OrderedDict[tuple[Any, ...], _Map] = collections.OrderedDict()
MAP_CACHE = 1024  # tensor maps kept: a model's buffers come back at the same addresses from torch's allocator


# How far L2 widens a tensor map's DRAM fetches (CUtensorMapL2promotion's suffix: NONE, L2_64B, L2_128B,
# L2_256B): L2_PROMOTION for a map whose rows start on 128-byte lines, OFF_LINE_PROMOTION for one with a stride that
# is no multiple of 128 bytes, so that most box rows straddle two lines (a 1x1 conv over 440 channels: 880-byte
# rows). An H200 (docs/device-runs/h200-odd-channels/): n64 c440 28x28 k440 took 81.7 us with 256-byte promotion,
# 70.4-71.1 with 128, 64 or none; with both operands' rows padded to 896 bytes, 49.6-52.1 with any of the four.
# Module-wide so that a probe can compare them (split_timeline.py, conv_channel_stride.py: --promotion); part of
# every cached map's key.
L2_PROMOTION = "L2_256B"
OFF_LINE_PROMOTION = "L2_128B"


def promotion_for(*strides_bytes: int) -> str:
    """The L2 promotion of a map whose outer dimensions are ``strides_bytes`` apart: OFF_LINE_PROMOTION where any of
    them is no multiple of 128 bytes (a box's rows, whichever dimension they walk, then start off lines)."""
    return L2_PROMOTION if all(st % 128 == 0 for st in strides_bytes) else OFF_LINE_PROMOTION


def l2_promotion(drv: Any, *strides_bytes: int) -> Any:
    """The driver's enum value of ``promotion_for(*strides_bytes)`` (tiled and im2col maps alike)."""
    return getattr(drv.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{promotion_for(*strides_bytes)}")


def encode_tiled(ptr: int, dtype: str, dims: tuple[int, ...], strides_bytes: tuple[int, ...],
                 box: tuple[int, ...], swizzle: str = "128B") -> _Map:
    """A tensor map over a dense 16-bit tensor at ``ptr``: ``dims`` innermost first, ``strides_bytes`` of
    every dimension but the innermost, boxes of ``box`` elements, ``swizzle`` (128B, 64B or 32B: the box's
    inner extent in bytes at most that), out-of-bounds reads as 0.
    The same arguments give the same map object (it encodes only the address and geometry, and a launch
    copies it by value): encoding one costs tens of microseconds of host time, paid at each
    ``tracea.ops`` call otherwise."""
    key = ("tiled", ptr, dtype, tuple(dims), tuple(strides_bytes), tuple(box), L2_PROMOTION, OFF_LINE_PROMOTION)
    return cached_map(key + (swizzle,) if swizzle != "128B" else key,
                      lambda: _encode_tiled(ptr, dtype, dims, strides_bytes, box, swizzle))


def cached_map(key: tuple[Any, ...], encode: Any) -> _Map:
    """The map ``encode()`` made for ``key`` (everything the encoding reads, the address included), kept in a
    bounded least-recently-used table."""
    with _MAPS_LOCK:
        got = _MAPS.get(key)
        if got is not None:
            _MAPS.move_to_end(key)
            return got
    out = encode()
    with _MAPS_LOCK:
        _MAPS[key] = out
        while len(_MAPS) > MAP_CACHE:
            _MAPS.popitem(last=False)
    return out


def _encode_tiled(ptr: int, dtype: str, dims: tuple[int, ...], strides_bytes: tuple[int, ...],
                  box: tuple[int, ...], swizzle: str = "128B") -> _Map:
    from cuda.bindings import driver as drv

    if any(st % 16 for st in strides_bytes) or ptr % 16:
        raise TraceaError(f"TMA needs 16-byte aligned rows (strides {list(strides_bytes)} B, base {ptr:#x})")
    dt = drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 if dtype == "bf16" else \
        drv.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    m = driver_call(drv.cuTensorMapEncodeTiled(
        dt, len(dims), ptr, [drv.cuuint64_t(d) for d in dims], [drv.cuuint64_t(st) for st in strides_bytes],
        [drv.cuuint32_t(b) for b in box], [drv.cuuint32_t(1)] * len(dims),
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}"),
        l2_promotion(drv, *strides_bytes),
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    out = _Map()
    ctypes.memmove(ctypes.addressof(out), m.getPtr(), MAP_BYTES)
    return out


def encode_2d(ptr: int, dtype: str, inner: int, outer: int, row_stride_elems: int, box: tuple[int, int]) -> _Map:
    """A tensor map over a row-major ``outer x inner`` 16-bit matrix at ``ptr`` (rows ``row_stride_elems``
    apart), boxes of ``box = (inner, outer)`` elements, 128B swizzle, out-of-bounds elements read as 0."""
    return encode_tiled(ptr, dtype, (inner, outer), (row_stride_elems * 2,), box)


def operand_maps(op: Any, sched: WgmmaSchedule, a_ptr: int, b_ptr: int,
                 a_stride: int | None = None, b_stride: int | None = None) -> tuple[_Map, _Map]:
    """The kernel's two tensor maps over ``op``'s A and B (row strides default to the dense ones): A's and B's,
    or with ``swap`` B's and A's (the kernel's A is op's B)."""
    boxes = tma_boxes(op, sched)
    maps = []
    given = ((a_ptr, a_stride), (b_ptr, b_stride))
    for which, (ptr, stride) in zip(("a", "b"), given[::-1] if sched.swap else given, strict=True):
        inner, outer = boxes[which]["dims"]
        maps.append(encode_2d(ptr, op.dtype.value, inner, outer, stride or inner, boxes[which]["box"]))
    assert boxes["a"]["box"][0] == BK or not boxes["a"]["kmajor"]
    return maps[0], maps[1]


class Launcher:
    """A loaded ``tr_wgmma_gemm`` cubin, launched with cuLaunchKernel on a given stream."""

    def __init__(self, cubin: bytes, entry: str, smem_bytes: int) -> None:
        from cuda.bindings import driver as drv

        self._drv = drv
        # one module per distinct cubin in a context (modules.py), whichever op signatures share it
        self.module = modules.module(bytes(cubin), lambda c: driver_call(drv.cuModuleLoadData(c), "cuModuleLoadData"),
                                     lambda: driver_call(drv.cuCtxGetCurrent(), "cuCtxGetCurrent"))
        self.func = driver_call(drv.cuModuleGetFunction(self.module, entry.encode()), "cuModuleGetFunction")
        self.func_handle = int(self.func)
        self.smem_bytes = smem_bytes
        modules.allow_dynamic_smem(drv, self.func, 0, smem_bytes)  # a CUfunction: the device is not asked

    def max_active_clusters(self, threads: int, cluster: int) -> int | None:
        """How many clusters of ``cluster`` blocks fit on the GPU at once (the driver's answer; some
        GPCs cannot host a whole pair on every SM), or None when the driver cannot say."""
        drv = self._drv
        try:
            cfg = drv.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = cluster, 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = threads, 1, 1
            cfg.sharedMemBytes = self.smem_bytes
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
            cfg.attrs = [attr]
            cfg.numAttrs = 1
            n = int(driver_call(drv.cuOccupancyMaxActiveClusters(self.func, cfg), "cuOccupancyMaxActiveClusters"))
            return n if n > 0 else None
        except Exception:  # noqa: BLE001 - an older driver or binding: fall back to SMs / cluster
            return None

    def attribute(self, name: str) -> int:
        attr = getattr(self._drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(driver_call(self._drv.cuFuncGetAttribute(attr, self.func), "cuFuncGetAttribute"))

    def launch(self, grid: int, threads: int, stream: Any, args: list[Any]) -> None:
        """``args``: ctypes values in kernel-parameter order (tensor maps, pointers as c_uint64, ...)."""
        from . import launches

        launches.kernel(self.func_handle, grid, threads, self.smem_bytes, stream, args)


def resident_grid(kernel: Any, geometry_op: Any, sched: WgmmaSchedule, artifact: Any,
                  rendered: Any) -> tuple[Launcher, int]:
    """(the launcher of ``artifact``'s cubin, the grid): the rendered grid, or for a persistent 2-block cluster as
    many pairs as the driver says fit at once (``launch_geometry`` over ``geometry_op``, the GEMM the kernel walks)."""
    from pathlib import Path

    launcher = Launcher(Path(artifact.binary).read_bytes(), rendered.entry, rendered.smem)
    grid = rendered.grid[0]
    if sched.cluster > 1 and sched.persistent:
        fit = launcher.max_active_clusters(rendered.block[0], sched.cluster)
        sms = int(getattr(kernel._dev.dev.properties, "multiprocessor_count", 0) or 132)
        grid = launch_geometry(geometry_op, sched, sms, fit)[0]
    return launcher, grid


def output_map(op: Any, sched: WgmmaSchedule, c_ptr: int) -> tuple[_Map, int]:
    """(tensor map over ``op``'s C for the TMA-store epilogue, store_tma flag): ``c_output_map``."""
    return c_output_map(op.m, op.n, op.dtype.value, sched, c_ptr)


def c_output_map(m: int, n: int, dtype: str, sched: WgmmaSchedule, c_ptr: int) -> tuple[_Map, int]:
    """(tensor map over a row-major ``m`` x ``n`` C for the TMA-store epilogue, store_tma flag). C rows
    that TMA cannot address (``n`` not a multiple of 8 elements) or a direct-store schedule get an empty
    map and the flag 0. Boxes of 64 x 64, or with ``swap`` 64 columns x ``bn`` rows (a C^T tile's slice)."""
    if sched.store != "tma" or (n * 2) % 16 or c_ptr % 16:
        return _Map(), 0
    return encode_2d(c_ptr, dtype, n, m, n, (64, sched.bn if sched.swap else 64)), 1


def gemm_args(tm_a: _Map, tm_b: _Map, tm_c: _Map, c: int, bias: int, residual: int, alpha: float,
              m: int, n: int, k: int, store_tma: int) -> list[Any]:
    """The kernel's arguments; ``m`` and ``n`` the kernel op's (``kernel_op``: exchanged under ``swap``)."""
    return [tm_a, tm_b, tm_c, ctypes.c_uint64(c), ctypes.c_uint64(bias), ctypes.c_uint64(residual),
            ctypes.c_float(alpha), ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_int(store_tma)]


def split_args(kernel: Any, rendered: Any) -> list[Any]:
    """The split-K arguments (workspace, semaphores, splits, dp_tiles) of a kernel whose ``Rendered``
    carries a ``split_k`` plan (``hopper/splitk.py``), its buffers from ``kernel._buffer``; the
    semaphores are zeroed when they are made (``_zeroed``: each launch leaves them zero again). Empty
    otherwise."""
    plan = rendered.metadata.get("split_k")
    if plan is None:
        return []
    need = spread_blocks(plan, rendered.metadata)
    if need > rendered.grid[0]:  # a slice would wait on one never started
        raise LaunchError(f"split-K: the spread fix-up needs all {plan['splits']} slices of a tile resident "
                          f"({need} blocks), but the grid holds {rendered.grid[0]}", "split_fix 'last'")
    ws = kernel._buffer("split_ws", max(16, plan["workspace_bytes"]))
    sem = kernel._zeroed("split_sem", max(4, 4 * plan["semaphores"]))
    return [ctypes.c_uint64(int(ws.ptr)), ctypes.c_uint64(int(sem.ptr)), ctypes.c_int(plan["splits"]),
            ctypes.c_int(plan["dp_tiles"])]


# ------------------------------------------------------------------------------- emitter hooks


def check_wgmma(op: Any, v: Any, schedule: Any, arch: Any) -> None:
    """What ``build._check`` asks of a cuda-wgmma kernel: a GEMM, a WgmmaSchedule, the sm_90a target."""
    if not isinstance(schedule, WgmmaSchedule):
        raise BadInputError(f"schedule: {v.id} takes a wgmma schedule, got {type(schedule).__name__}")
    require_sm90a(op, v, arch, "fp32 runs on cuda-simt")
    schedule.validate(op, arch.smem_optin)


def require_sm90a(op: Any, v: Any, arch: Any, fp32_hint: str) -> None:
    """Every cuda-wgmma kernel's target checks: sm_90 exactly, the architecture-specific sm_90a (wgmma, TMA
    and setmaxnreg are sm_90a instructions), and a 16-bit input (``fp32_hint`` says where fp32 runs)."""
    if arch.cc != (9, 0):
        raise UnsupportedError(f"{v.id} runs only on sm_90 (Hopper: wgmma, TMA, setmaxnreg), not {arch.name}",
                               "cuda-mma-sync runs on sm_80 and later")
    if arch.suffix != "a":
        raise UnsupportedError(f"{v.id} needs the architecture-specific target sm_90a, not {arch.name}",
                               "--arch sm_90a")
    if op.dtype.value not in v.precisions:
        raise UnsupportedError(f"{v.id} computes {', '.join(v.precisions)}, not {op.dtype.value}", fp32_hint)


def copy_2d(drv: Any, src: int, src_pitch: int, dst: int, dst_pitch: int, width: int, height: int) -> Any:
    """A device-to-device ``CUDA_MEMCPY2D`` of ``height`` rows of ``width`` bytes (for cuMemcpy2DAsync)."""
    cp = drv.CUDA_MEMCPY2D()
    cp.srcMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    cp.srcDevice = src
    cp.srcPitch = src_pitch
    cp.dstMemoryType = drv.CUmemorytype.CU_MEMORYTYPE_DEVICE
    cp.dstDevice = dst
    cp.dstPitch = dst_pitch
    cp.WidthInBytes = width
    cp.Height = height
    return cp


class GemmViewKernel(CudaKernel):
    """The kernel object of a kernel that runs the Hopper GEMM's kernel over another op's buffers (a 1x1 conv's,
    ``hopper/conv1x1.py``; the scaled 8-bit GEMM's, ``hopper/scaled_gemm.py``): its launcher and grid over
    ``view``, the GEMM it walks; a subclass's ``upload`` sets ``_wargs`` (the tensor maps over the device buffers)."""

    what = "cuda-wgmma"

    def __init__(self, op: Any, artifact: Any, rendered: Any, scalars: dict[str, Any], sched: WgmmaSchedule,
                 view: Any) -> None:
        super().__init__(op, artifact, rendered, scalars)
        self.schedule, self.view = sched, view
        self._launcher, self._grid = resident_grid(self, view, sched, artifact, rendered)
        self._wargs: list[Any] | None = None

    def launch(self) -> None:
        if self._wargs is None:
            raise LaunchError(f"{self.what}: launch before upload (no tensor maps yet)")
        self._launcher.launch(self._grid, self.rendered.block[0], self._dev.stream.handle, self._wargs)


class WgmmaKernel(CudaKernel):
    """The CUDA emitter's kernel object for cuda-wgmma: buffers, timing and verification as for every
    CUDA kernel; the launch builds the two tensor maps over the device buffers and passes them by value.

    Operands whose rows TMA cannot address (a row stride that is not a multiple of 16 bytes, e.g. K = 4097
    row-major A) are copied into padded device buffers by ``cuMemcpy2DAsync`` at every launch, inside the
    timed region, so the cost of the padding is part of the figure."""

    def __init__(self, op: Any, artifact: Any, rendered: Any, scalars: dict[str, float | int]) -> None:
        super().__init__(op, artifact, rendered, scalars)
        self.schedule = WgmmaSchedule.from_json(artifact.schedule)
        self._launcher, self._grid = resident_grid(self, op, self.schedule, artifact, rendered)
        self._wargs: list[Any] | None = None
        self._copies: list[Any] = []
        self.padding = tma_unsupported(op)

    def upload(self, inputs: dict[str, Any]) -> None:
        super().upload(inputs)
        drv = self._dev.driver
        op, ptrs, strides, self._copies = self.op, {}, {}, []
        for which in ("a", "b"):
            rows, inner = self._shapes[which]
            ptr = int(self._dbuf[which].ptr)
            if (inner * 2) % 16:
                padded = (inner + 7) // 8 * 8
                buf = self._buffer(f"{which}_tma", rows * padded * 2)
                self._copies.append(copy_2d(drv, ptr, inner * 2, int(buf.ptr), padded * 2, inner * 2, rows))
                ptr, inner = int(buf.ptr), padded
            ptrs[which], strides[which] = ptr, inner
        ma, mb = operand_maps(op, self.schedule, ptrs["a"], ptrs["b"], strides["a"], strides["b"])
        opt = {name: int(self._dbuf[name].ptr) if name in self._dbuf else 0 for name in ("bias", "residual")}
        out = int(self._dbuf["out"].ptr)
        mc, store_tma = output_map(op, self.schedule, out)
        kop = kernel_op(op, self.schedule)
        self._wargs = gemm_args(ma, mb, mc, out, opt["bias"], opt["residual"], op.alpha, kop.m, kop.n, op.k,
                                store_tma) + split_args(self, self.rendered)

    def launch(self) -> None:
        if self._wargs is None:
            raise LaunchError("cuda-wgmma: launch before upload (no tensor maps yet)")
        from . import launches

        stream = self._dev.stream.handle
        for cp in self._copies:
            launches.memcpy2d(cp, stream)
        self._launcher.launch(self._grid, self.rendered.block[0], stream, self._wargs)
