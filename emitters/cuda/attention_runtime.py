"""The CUDA attention kernels' host object: a ``CudaKernel`` (runtime.py: loading, launch, timing with the
same L2 flush and hold) whose buffers are attention's: q, k, v, out, lse, and the tile plan (``tile_ptr``:
CSR pointers then launch order; ``tile_idx``; ``bmask``, pointer 0 without a block mask), uploaded once.

``kernel(inputs)`` returns O; ``forward(inputs)`` returns (O, lse). A kernel that walks its keys without the
plan (the decode core's ``DecodeKernel``) overrides ``upload_plan``; after ``PARAMS`` a kernel may take its own
``workspace`` (zeroed once by ``CudaKernel``). What a subclass's ``Rendered`` must carry: ``params`` starting
with attention_plan's ``PARAMS``, and ``metadata["tile"]`` with the ``bq`` and ``bk`` of its plan
(``metadata["order"]``: "longest-first", the default, or "natural").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tracea.doctor.errors import BadInputError
from tracea.kernels.ops.attention import INDEX_INPUTS

from .attention_plan import BUFFERS, FLOAT_SCALARS, PARAMS, block_mask_bytes
from .runtime import CudaKernel, pack_args


class AttentionKernel(CudaKernel):
    """One attention kernel on the current GPU (see the module docstring)."""

    def __init__(self, op: Any, artifact: Any, rendered: Any, scalars: dict[str, Any]) -> None:
        if tuple(rendered.params[:len(PARAMS)]) != PARAMS:
            raise BadInputError(f"{rendered.name}: an attention kernel takes {', '.join(PARAMS)} first")
        super().__init__(op, artifact, rendered, scalars)
        self._lse_shape = tuple(op.lse_shape())
        self._computed = self.upload_plan(op, rendered)

    def upload_plan(self, op: Any, rendered: Any) -> int:
        """Upload the CSR tile plan (and the block mask) this kernel walks; return the tiles computed per
        (batch, head)."""
        from .attention import plan_arrays

        tile = rendered.metadata.get("tile", {})
        ptr, idx, computed = plan_arrays(op, int(tile["bq"]), int(tile["bk"]),
                                         rendered.metadata.get("order", "longest-first"))
        for name, arr in (("tile_ptr", ptr), ("tile_idx", idx), ("bmask", block_mask_bytes(op))):
            if arr is not None:
                self._buffer(name, arr.nbytes).upload(arr)
        return computed

    @property
    def tiles_computed(self) -> int:
        """(q tile, k tile) pairs computed over batch x heads in one call (the plan's, fixed per op)."""
        return self._computed * self.op.batch * self.op.heads

    def upload(self, inputs: dict[str, np.ndarray]) -> None:
        super().upload(inputs)
        self._buffer("lse", int(np.prod(self._lse_shape)) * 4)

    def _args(self, params: Any = None) -> list[Any]:
        """The kernel's parameters in order (``params``: the first ones only): device pointers (0 for a buffer it
        does not have), ints, floats."""
        return pack_args(self.rendered.params if params is None else params, (*BUFFERS, "workspace", *INDEX_INPUTS),
                         FLOAT_SCALARS, self._dbuf, self._scalars)

    def forward(self, inputs: dict[str, np.ndarray],
                out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(O, lse) of one call; ``out`` (optional) receives O, its contents uploaded first (a NaN poison
        shows any element the kernel leaves unwritten); lse is poisoned with NaN on the device likewise."""
        if out is not None and (not isinstance(out, np.ndarray) or out.shape != self._out_shape
                                or out.dtype != self._dtype or not out.flags.c_contiguous):
            raise BadInputError(f"out: expected a C-contiguous {self._out_shape} {self._dtype} array")
        o = out if out is not None else np.empty(self._out_shape, dtype=self._dtype)
        lse = np.full(self._lse_shape, np.nan, dtype=np.float32)
        with self._lock:
            self.upload(inputs)
            if out is not None:
                self._dbuf["out"].upload(out)
            self._dbuf["lse"].upload(lse)
            self.launch()
            self._dev.stream.sync()
            self._dbuf["out"].download(o)
            self._dbuf["lse"].download(lse)
        return o, lse

    def __call__(self, inputs: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        return self.forward(inputs, out)[0]

    def __repr__(self) -> str:
        return f"AttentionKernel({self.artifact.name}, variant={self.artifact.variant})"


def attention_kernel(op: Any, artifact: Any, rendered: Any, scalars: dict[str, Any]) -> AttentionKernel:
    return AttentionKernel(op, artifact, rendered, scalars)
