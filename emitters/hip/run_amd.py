"""A HIP kernel on an AMD GPU (issue 19): compiled by hipcc for the GPU's own target, loaded and launched
through the HIP runtime (runtime.py), verified against the float64 reference on fresh random inputs
(verify.py), then timed with HIP events. Written for an MI200/MI300 machine; it has not run on one
(docs/hip.md)."""

from __future__ import annotations

import ctypes
import statistics
from typing import Any

from .build import launch


class HipKernel:
    """One compiled HIP kernel on device 0, for one op: ``kernel(inputs, out)`` fills ``out`` (the op's
    storage array); ``kernel.time(inputs, warmup, repeats)`` gives a ``Timing`` from HIP events."""

    def __init__(self, op: Any, schedule: Any, target: str, artifact: Any = None) -> None:
        from .compiler import compile_hip
        from .runtime import HipRuntime

        self.op, self.schedule, self.target, self.artifact = op, schedule, target, artifact
        self.rt = HipRuntime()
        self.ln = launch(op, schedule, "amd")
        self.code = compile_hip(self.ln.source, self.ln.name, target)
        self.fn = self.rt.load(self.code.bundle.read_bytes(), self.ln.name)

    def _launcher(self, inputs: dict[str, Any], out: Any) -> tuple[Any, list[Any]]:
        rt = self.rt
        bufs = {name: rt.alloc(arr.nbytes) for name, arr in inputs.items()}
        bufs["out"] = rt.alloc(out.nbytes)
        for name, arr in inputs.items():
            rt.upload(bufs[name], arr)
        rt.upload(bufs["out"], out)
        scalars = {"i32": ctypes.c_int, "f32": ctypes.c_float}
        args = [bufs[v] if k == "in" else bufs["out"] if k == "out" else ctypes.c_void_p(0) if k == "null"
                else scalars[k](v) for k, v in self.ln.args]

        def run() -> None:
            rt.launch(self.fn, self.ln.grid, self.ln.block, args)

        return run, list(bufs.values())

    def __call__(self, inputs: dict[str, Any], out: Any) -> None:
        run, bufs = self._launcher(inputs, out)
        try:
            run()
            self.rt.synchronize()
            self.rt.download(out, bufs[-1])
        finally:
            for ptr in bufs:
                self.rt.free(ptr)

    def time(self, inputs: dict[str, Any], warmup: int = 3, repeats: int = 20) -> Any:
        import numpy as np

        from ..timing import Timing, _p95

        run, bufs = self._launcher(inputs, np.empty(self.op.output_shape(), self.op.output_dtype.storage))
        try:
            ms = sorted(self.rt.time_ms(run, warmup, repeats))
        finally:
            for ptr in bufs:
                self.rt.free(ptr)
        return Timing(statistics.median(ms), _p95(ms), ms[0], len(ms))


def on_amd(op: Any, schedule: Any, target: str, seed: int, warmup: int = 3, repeats: int = 20) -> dict[str, Any]:
    """{"rel_err", "tolerance", "ok", "p50_ms"} of the HIP kernel for ``op`` on device 0 (``target``: its
    gfx): verified first, timed only when right."""
    import numpy as np

    from .verify import verdict

    kernel = HipKernel(op, schedule, target)
    inputs = op.random_inputs(np.random.default_rng(seed))
    out = np.empty(op.output_shape(), op.output_dtype.storage)
    out.view(np.uint8).fill(0xFF)  # poison: NaN in every float type
    kernel(inputs, out)
    result = verdict(op, out, inputs)
    timing = kernel.time(inputs, warmup, repeats) if result["ok"] else None
    return {**result, "p50_ms": timing.p50_ms if timing else None}
