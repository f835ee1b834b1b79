"""The C++ GPU dialect CUDA and HIP share, on the C-style base (emitters/cstyle.py): kernel and shared-memory
spellings, ``__launch_bounds__``, the fused epilogue's statements and the device functions they call.

HIP is CUDA's dialect with another runtime, so everything here renders the same for both; what differs
(NVRTC's include-free prelude and PTX wrappers, hipcc's headers and MFMA builtins) lives in each backend's
renderer (emitters/cuda/render.py ``CudaRenderer``, emitters/hip/render.py ``HipRenderer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from .cstyle import CStyleRenderer, Param

# The epilogue vocabulary (kernels/epilogue.py) as statements over the fp32 value ``v``; ``{bias}`` and
# ``{residual}`` stand for the caller's expressions loading those operands. ``tr_gelu`` is GELU below.
EPILOGUE = {
    "bias": "v += {bias};",
    "relu": "v = v < 0.0f ? 0.0f : v;",  # not fmaxf, which returns 0 for a NaN: a NaN stays NaN, as in torch.relu
    "gelu": "v = tr_gelu(v);",
    "scale": "v *= alpha;",
    "residual": "v += {residual};",
}

GELU = r"""static __device__ __forceinline__ float tr_gelu(float x) {  /* tanh form, as the IR's reference */
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
"""


class GpuRenderer(CStyleRenderer):
    """What a CUDA and a HIP kernel spell alike."""

    language: ClassVar[str] = "gpu"
    kernel_prefix: ClassVar[str] = 'extern "C" __global__ '
    static_prefix: ClassVar[str] = "static __device__ "
    inline_prefix: ClassVar[str] = "static __device__ __forceinline__ "
    restrict: ClassVar[str] = "__restrict__"
    smem_prefix: ClassVar[str] = "__shared__ "
    barrier: ClassVar[str] = "__syncthreads();"
    fence: ClassVar[str] = "__threadfence();"  # this thread's writes seen by the whole device before its later ones
    max_threads: ClassVar[int] = 1024

    def render_kernel_signature(self, name: str, params: Sequence[Param], ret: str = "void",
                                launch_bounds: tuple[int, ...] | None = None) -> str:
        """``__launch_bounds__`` (max threads, and min blocks per multiprocessor if given) goes between the
        return type and the name."""
        if launch_bounds:
            name = f"__launch_bounds__({', '.join(map(str, launch_bounds))}) {name}"
        return self.render_signature(name, params, ret, self.kernel_prefix)


def gpu_suites(quick: bool = False, variants: Any = None) -> dict[str, list[Any]]:
    """A GPU backend's `tracea bench` suites: each op's suites (kernels/workloads.py) as a GPU's users run
    them (bf16 GEMMs, fp16 NHWC convolutions at batch 1 and 32, fp16 softmax, 8-bit GEMMs). ``quick``: a few rows of
    each. ``variants``: the backend's; a suite whose rows none of them computes (their op and input type) is left
    out."""
    from tracea.kernels import workloads

    found = workloads.suites("device", quick)
    if variants is None:
        return found

    def computed(op: Any) -> bool:
        return any(v.op == op.kind and op.dtype.value in v.precisions for v in variants)

    return {name: ops for name, ops in found.items() if ops and computed(ops[0])}


def worker_mismatch(head: dict[str, Any], worker: dict[str, Any]) -> str | None:
    """A GPU backend's rule for a tuning worker's environment: its GPUs (the one it was given) must be among
    the head's, every other fact equal."""
    for k in sorted((set(head) | set(worker)) - {"gpus"}):
        if head.get(k) != worker.get(k):
            return f"{k} is {worker.get(k)!r} there, {head.get(k)!r} here"
    mine = [list(g) for g in head.get("gpus") or []]
    other = [list(g) for g in worker.get("gpus") or []]
    if not other or any(g not in mine for g in other):
        return f"its GPUs {other} are not among this machine's {mine}"
    return None


def gpu_members(variable: str, n: int, gpus: int, what: str) -> list[dict[str, str]]:
    """``n`` tuning workers a GPU each, named by the environment ``variable`` (``CUDA_VISIBLE_DEVICES``,
    ``HIP_VISIBLE_DEVICES``): the i-th device this process sees, or the i-th of the caller's own list."""
    import os

    from tracea.doctor.errors import BadInputError

    visible = os.environ.get(variable)
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(gpus)]
    have = min(gpus, len(ids))  # the caller's own list may name fewer than the machine has
    if n > have:
        raise BadInputError(f"--workers: {n} {what} workers need as many GPUs; this process sees {have}",
                            f"--workers 1..{max(have, 1)}")
    return [{variable: ids[i]} for i in range(n)]
