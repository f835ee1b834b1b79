"""The HIP renderer: the GPU dialect CUDA and HIP share (emitters/gpu.py, on the C-style base) with HIP's
file suffix, headers, limits and prelude. The kernels (gemm.py, softmax.py) render their signatures
through it; their bodies follow one of the two preludes (prelude.py)."""

from __future__ import annotations

from typing import ClassVar

from ..cstyle import Param
from ..gpu import GpuRenderer
from .prelude import prelude


class HipRenderer(GpuRenderer):
    language: ClassVar[str] = "hip"
    file_suffix: ClassVar[str] = ".hip"
    includes: ClassVar[tuple[str, ...]] = ("hip/hip_runtime.h",)
    shared_max: ClassVar[int | None] = 64 * 1024  # LDS per workgroup on CDNA2 and CDNA3
    wavefront: ClassVar[int] = 64
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp16", "bf16")

    def prelude(self, target: str, dtype: str, waves: int) -> str:
        """The AMD (hipcc) or NVIDIA (NVRTC, software MFMA) prelude: prelude.py."""
        return prelude(target, dtype, waves)

    def kernel(self, name: str, threads: int | str, pointers: tuple[tuple[str, bool], ...], scalars: tuple[str, ...],
               scalar_type: str = "int") -> str:
        """``extern "C" __global__ void __launch_bounds__(threads) name(...) {``: ``pointers`` (name, written)
        of element type ``T``, then ``scalars`` of ``scalar_type`` (a name ``x:float`` gives its own type)."""
        params = [Param(n, "T", pointer=True, const=not out, restrict=True) for n, out in pointers]
        for s in scalars:
            n, _, t = s.partition(":")
            params.append(Param(n, t or scalar_type))
        return self.render_kernel_signature(name, params, launch_bounds=(threads,)) + " {"
