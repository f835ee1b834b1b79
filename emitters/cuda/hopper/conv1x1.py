"""1x1 convolutions as a plain GEMM (``cuda-wgmma.conv2d``, ``path="gemm"``): a 1x1 filter with stride 1
and no padding over NHWC is out[N*H*W, K] = x[N*H*W, C] @ w[K, C]^T (+ bias), so the conv runs the
Hopper GEMM's kernel (``gemm.py``: TMA on both operands, no im2col index math) over its own buffers.

``conv_paths.gemm_view(op)`` is that GEMM: A = x as an M x C row-major matrix (M = N*H*W, rows C apart),
B = the K x 1 x 1 x C filter as a column-major C x K operand (K-major, rows C apart), the conv's bias
the GEMM's bias epilogue. The source is the GEMM core's for that ``Gemm`` and ``sched.as_gemm()``,
byte for byte (one compiled binary serves both); the tensor maps are encoded over x, the filter and
the output directly (no copies: the path needs C and K multiples of 8).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import gemm
from .conv_paths import gemm_view
from .conv_schedule import WgmmaConvSchedule


def render(op: Any, sched: WgmmaConvSchedule) -> str:
    """The GEMM core's source for ``gemm_view(op)`` under ``sched.as_gemm()``."""
    sched.validate(op)
    return gemm.render(gemm_view(op), sched.as_gemm())


def rendered(op: Any, sched: WgmmaConvSchedule, sm_count: int) -> Any:
    """The GEMM's ``Rendered`` for ``gemm_view(op)`` (its name, entry, parameters and launch), with the
    conv it stands for in the metadata."""
    sched.validate(op)
    view = gemm_view(op)
    r = gemm.rendered(view, sched.as_gemm(), sm_count)
    meta = {**r.metadata, "conv_as_gemm": {
        "M": view.m, "N": view.n, "K": view.k, "schedule": sched.name,
        "a": f"x (N x H x W x C) as [{view.m}, {view.k}] row-major", "b": f"weight (K x 1 x 1 x C) as "
        f"[{view.n}, {view.k}] (column-major B)", "bias": op.bias}}
    return dataclasses.replace(r, metadata=meta)


def tma_boxes(op: Any, sched: WgmmaConvSchedule) -> dict[str, dict[str, Any]]:
    """What the host encodes for x ("a") and the filter ("b"): the GEMM's boxes for ``gemm_view(op)``."""
    return gemm.tma_boxes(gemm_view(op), sched.as_gemm())


def gemm_view_kernel(op: Any, artifact: Any, rendered_: Any, scalars: dict[str, Any]) -> Any:
    """The kernel object of the "gemm" path: the conv's buffers (x, weight, bias, out), uploaded and
    checked as for every CUDA kernel, launched as the GEMM (``tma.WgmmaKernel``'s launch over them)."""
    from ..tma import GemmViewKernel, gemm_args, operand_maps, output_map, split_args

    view = gemm_view(op)
    sched = WgmmaConvSchedule.from_json(artifact.schedule).as_gemm()

    class WgmmaConv1x1Kernel(GemmViewKernel):
        """x, the filter and the output are the GEMM's A, B and C as they are: three tensor maps over
        the conv's device buffers, no copies."""

        what = "cuda-wgmma.conv2d (gemm path)"

        def upload(self, inputs: dict[str, Any]) -> None:
            super().upload(inputs)
            ptr = {name: int(self._dbuf[name].ptr) if name in self._dbuf else 0
                   for name in ("x", "weight", "bias", "out")}
            ma, mb = operand_maps(view, sched, ptr["x"], ptr["weight"])
            mc, store_tma = output_map(view, sched, ptr["out"])
            kop = gemm.kernel_op(view, sched)
            self._wargs = gemm_args(ma, mb, mc, ptr["out"], ptr["bias"], 0, 1.0, kop.m, kop.n, view.k,
                                    store_tma) + split_args(self, self.rendered)

    return WgmmaConv1x1Kernel(op, artifact, rendered_, scalars, sched, view)
