"""The attention kernel's runtime object: O as every CPU kernel returns it, plus the lse and the count
of K/V blocks loaded, which the entry writes into buffers this object owns."""

from __future__ import annotations

from typing import Any

import numpy as np

from .runtime import CpuKernel


class AttentionKernel(CpuKernel):
    """A compiled attention kernel: ``kernel(inputs)`` returns O as every CPU kernel does; after a call
    ``lse`` holds the log-sum-exp and ``tiles_computed`` the K/V blocks it loaded, over all tasks."""

    def __init__(self, op: Any, artifact: Any, rendered: Any) -> None:
        super().__init__(op, artifact, rendered)
        self.lse = np.empty(op.lse_shape(), dtype=np.float32)
        self._stats = np.zeros(1, dtype=np.int64)
        bm = op.block_mask_array()
        self._mask = None if bm is None else np.ascontiguousarray(bm, dtype=np.uint8)
        names = rendered.buffers
        self._bufs[names.index("lse")] = self.lse.ctypes.data
        self._bufs[names.index("stats")] = self._stats.ctypes.data
        self._bufs[names.index("mask")] = None if self._mask is None else self._mask.ctypes.data

    def __call__(self, inputs: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        self._stats[0] = 0
        return super().__call__(inputs, out)

    @property
    def tiles_computed(self) -> int:
        return int(self._stats[0])

    def forward(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(O, lse) of one call, both fresh arrays."""
        out = self(inputs)
        return out, self.lse.copy()
