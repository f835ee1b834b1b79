"""A HIP kernel's logic run on an NVIDIA GPU through the NVIDIA prelude (issue 19): the rendered source
compiled by NVRTC (emitters/nvrtc.py, the CUDA backend's compiler too), launched through CuPy, its output verified against the op's
float64 reference on fresh random inputs (verify.py). This proves the kernel's index math, tiling, edges,
epilogue and data flow, not its speed on AMD hardware (the software MFMA is slow by design)."""

from __future__ import annotations

from typing import Any

from .build import launch


def on_nvidia(op: Any, schedule: Any, seed: int, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the HIP kernel for ``op`` (GEMM, conv2d or softmax) with ``schedule`` on device 0, on fresh random
    inputs of ``seed`` (or the given ``inputs``); {"rel_err", "tolerance", "ok"}."""
    import cupy as cp
    import numpy as np

    from ..nvrtc import compile_cached
    from .verify import verdict

    ln = launch(op, schedule, "nvidia")
    cubin, _, _, _, _ = compile_cached(ln.source, ln.name, ln.name,
                                       "sm_{}{}".format(*cp.cuda.Device(0).compute_capability))
    fn = cp.RawModule(path=str(cubin)).get_function(ln.name)
    inputs = op.random_inputs(np.random.default_rng(seed)) if inputs is None else inputs
    sixteen = op.dtype.value != "fp32"
    device = {k: cp.asarray(v.view(np.uint16) if sixteen else v) for k, v in inputs.items()}
    out = cp.full(op.output_shape(), 0x7FFF, dtype=cp.uint16) if sixteen else \
        cp.full(op.output_shape(), np.nan, dtype=cp.float32)  # poison: a NaN in every type
    scalars = {"i32": np.int32, "f32": np.float32}
    args = [device[v] if k == "in" else out if k == "out" else np.uint64(0) if k == "null" else scalars[k](v)
            for k, v in ln.args]
    if ln.dynamic_smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = ln.dynamic_smem
    fn(ln.grid, ln.block, tuple(args), shared_mem=ln.dynamic_smem)
    cp.cuda.Device(0).synchronize()
    host = cp.asnumpy(out)
    return verdict(op, host.view(op.dtype.storage) if sixteen else host, inputs)
