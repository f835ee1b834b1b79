"""A HIP kernel's logic run on an NVIDIA GPU through the NVIDIA prelude (issue 19): the rendered source
compiled by NVRTC (emitters/cuda/compiler.py), launched through CuPy, its output verified against the op's
float64 reference on fresh random inputs. This proves the kernel's index math, tiling, edges and data
flow, not its speed on AMD hardware (the software MFMA is slow by design)."""

from __future__ import annotations

from typing import Any

from .gemm import KERNEL, HipGemmSchedule, grid, render
from .softmax import HipSoftmaxSchedule


def gemm_on_nvidia(op: Any, sched: HipGemmSchedule, seed: int) -> dict[str, Any]:
    """Run the HIP GEMM for ``op`` (a kernels.Gemm, bf16 or fp16, row-major, no epilogue) on device 0;
    {"rel_err", "tolerance", "ok"}."""
    import cupy as cp
    import numpy as np

    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    from ..cuda.compiler import compile_cached

    cubin, _, _, _, _ = compile_cached(render(op.dtype.value, sched, "nvidia"), KERNEL, KERNEL,
                                       "sm_{}{}".format(*cp.cuda.Device(0).compute_capability))
    fn = cp.RawModule(path=str(cubin)).get_function(KERNEL)
    inputs = op.random_inputs(np.random.default_rng(seed))
    a = cp.asarray(inputs["a"].view(np.uint16))
    b = cp.asarray(inputs["b"].view(np.uint16))
    c = cp.full((op.m, op.n), 0x7FFF, dtype=cp.uint16)  # poison: a NaN in bf16 and in fp16
    fn(grid(op.m, op.n, sched), (sched.threads, 1, 1),
       (a, b, c, np.int32(op.m), np.int32(op.n), np.int32(op.k), np.float32(op.alpha)))
    cp.cuda.Device(0).synchronize()
    out = cp.asnumpy(c).view(op.dtype.storage)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    tol = tolerance(op)
    return {"rel_err": float(err), "tolerance": tol, "ok": bool(err <= tol)}


def softmax_on_nvidia(op: Any, sched: HipSoftmaxSchedule, seed: int) -> dict[str, Any]:
    """Run the HIP softmax for ``op`` (a kernels.Softmax) on device 0; {"rel_err", "tolerance", "ok"}."""
    import cupy as cp
    import numpy as np

    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    from ..cuda.compiler import compile_cached
    from . import softmax as sm

    cubin, _, _, _, _ = compile_cached(sm.render(op.dtype.value, sched, "nvidia"), sm.KERNEL, sm.KERNEL,
                                       "sm_{}{}".format(*cp.cuda.Device(0).compute_capability))
    fn = cp.RawModule(path=str(cubin)).get_function(sm.KERNEL)
    inputs = op.random_inputs(np.random.default_rng(seed))
    x = cp.asarray(inputs["x"])
    y = cp.full(op.output_shape(), np.nan, dtype=np.float32) if op.dtype.value == "fp32" else \
        cp.full(op.output_shape(), 0x7FFF, dtype=cp.uint16).view(op.dtype.storage)
    fn(sm.grid(op.rows, sched), (sched.threads, 1, 1), (x, y, np.int32(op.rows), np.int32(op.cols)))
    cp.cuda.Device(0).synchronize()
    err = relative_error(to_float64(cp.asnumpy(y), op.dtype), op.reference(inputs))
    tol = tolerance(op)
    return {"rel_err": float(err), "tolerance": tol, "ok": bool(err <= tol)}


def conv_on_nvidia(op: Any, sched: HipGemmSchedule, seed: int) -> dict[str, Any]:
    """Run the HIP implicit-GEMM conv for ``op`` (a kernels.Conv2d: NHWC, groups 1, no bias, bf16 or fp16)
    on device 0; {"rel_err", "tolerance", "ok"}."""
    import cupy as cp
    import numpy as np

    from tracea.doctor.errors import BadInputError
    from tracea.kernels import relative_error, tolerance
    from tracea.kernels.dtypes import to_float64

    from ..cuda.compiler import compile_cached
    from .gemm import CONV_KERNEL

    if op.layout != "nhwc" or op.groups != 1 or op.bias:
        raise BadInputError("the HIP conv takes NHWC, groups 1, no bias")
    cubin, _, _, _, _ = compile_cached(render(op.dtype.value, sched, "nvidia", "conv"), CONV_KERNEL, CONV_KERNEL,
                                       "sm_{}{}".format(*cp.cuda.Device(0).compute_capability))
    fn = cp.RawModule(path=str(cubin)).get_function(CONV_KERNEL)
    inputs = op.random_inputs(np.random.default_rng(seed))
    x, w = (cp.asarray(inputs[name].view(np.uint16)) for name in ("x", "weight"))
    y = cp.full(op.output_shape(), 0x7FFF, dtype=cp.uint16)
    ints = [op.n, op.h, op.w, op.c, op.p, op.q, op.k, op.r, op.s, *op.stride, *op.padding, *op.dilation]
    fn(grid(op.n * op.p * op.q, op.k, sched), (sched.threads, 1, 1), (x, w, y, *map(np.int32, ints)))
    cp.cuda.Device(0).synchronize()
    out = cp.asnumpy(y).view(op.dtype.storage)
    err = relative_error(to_float64(out, op.dtype), op.reference(inputs))
    tol = tolerance(op)
    return {"rel_err": float(err), "tolerance": tol, "ok": bool(err <= tol)}
