"""The HIP GEMM on an AMD GPU (issue 19): compiled by hipcc for the GPU's own target, loaded and launched
through the HIP runtime (runtime.py), verified against the float64 reference on fresh random inputs, and
timed with HIP events. Written for an MI200/MI300 machine; it has not run on one (docs/hip.md)."""

from __future__ import annotations

import ctypes
import statistics
from typing import Any

from .gemm import KERNEL, HipGemmSchedule, grid, render


def gemm_on_amd(op: Any, sched: HipGemmSchedule, target: str, seed: int, warmup: int = 3,
                repeats: int = 20) -> dict[str, Any]:
    """{"rel_err", "tolerance", "ok", "p50_ms"} of the HIP GEMM for ``op`` on device 0 (``target``: its gfx)."""
    import numpy as np

    from .compiler import compile_hip
    from .runtime import HipRuntime
    from .verify import verdict

    rt = HipRuntime()
    fn = rt.load(compile_hip(render(op.dtype.value, sched, "amd"), KERNEL, target).bundle.read_bytes(), KERNEL)
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.full((op.m, op.n), 0x7FFF, dtype=np.uint16)
    bufs = {name: rt.alloc(arr.nbytes) for name, arr in (("a", inputs["a"]), ("b", inputs["b"]), ("c", out))}
    try:
        rt.upload(bufs["a"], inputs["a"])
        rt.upload(bufs["b"], inputs["b"])
        rt.upload(bufs["c"], out)
        args = [bufs["a"], bufs["b"], bufs["c"], ctypes.c_int(op.m), ctypes.c_int(op.n), ctypes.c_int(op.k),
                ctypes.c_float(op.alpha)]

        def run() -> None:
            rt.launch(fn, grid(op.m, op.n, sched), (sched.threads, 1, 1), args)

        run()
        rt.synchronize()
        rt.download(out, bufs["c"])
        result = verdict(op, out.view(op.dtype.storage), inputs)
        times = rt.time_ms(run, warmup, repeats) if result["ok"] else []  # verified first, then timed
    finally:
        for ptr in bufs.values():
            rt.free(ptr)
    return {**result, "p50_ms": statistics.median(times) if times else None}
