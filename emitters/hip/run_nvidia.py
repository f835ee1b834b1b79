"""A HIP kernel's logic run on an NVIDIA GPU through the NVIDIA prelude (issue 19): the rendered source
compiled by NVRTC (emitters/cuda/compiler.py), launched through CuPy, its output verified against the op's
float64 reference on fresh random inputs. This proves the kernel's index math, tiling, edges and data
flow, not its speed on AMD hardware (the software MFMA is slow by design)."""

from __future__ import annotations

from typing import Any

from .gemm import KERNEL, HipGemmSchedule, grid, render


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
