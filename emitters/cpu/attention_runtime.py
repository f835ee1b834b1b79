"""The attention kernel's runtime object: a ``CpuKernel`` (O, as every CPU kernel returns it) wrapped with
the buffers its entry also writes: the lse (``op.lse_shape()``: (heads, tokens) for packed entries) and the count
of K/V blocks loaded. A serving op's lengths, block table or packed offsets are checked
(``Attention.check_serving_inputs``) before each call."""

from __future__ import annotations

from typing import Any

import numpy as np


class AttentionKernel:
    """``kernel(inputs)`` returns O; after a call ``lse`` holds the log-sum-exp and ``tiles_computed``
    the K/V blocks loaded over all tasks. Everything else is the wrapped ``CpuKernel``'s."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        op = kernel.op
        self._serving = op.serving
        self.lse = np.empty(op.lse_shape(), dtype=np.float32)
        self._stats = np.zeros(1, dtype=np.int64)
        bm = op.block_mask_array()
        self._mask = None if bm is None else np.ascontiguousarray(bm, dtype=np.uint8)
        names = kernel._names
        bufs = kernel._bufs  # the entry's pointer array; the CpuKernel sets only the inputs' and out's slots
        bufs[names.index("lse")] = self.lse.ctypes.data
        bufs[names.index("stats")] = self._stats.ctypes.data
        bufs[names.index("mask")] = None if self._mask is None else self._mask.ctypes.data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)

    def __call__(self, inputs: dict[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
        if self._serving:  # one BadInputError before any compute: a length past seq_k, a page outside the pool,
            # offsets that decrease or do not end at the tokens
            self._kernel.op.check_serving_inputs(inputs)
        self._stats[0] = 0
        return self._kernel(inputs, out)

    def launch_ptrs(self, ptrs: tuple[int, ...], stream: int = 0) -> None:
        """The prepared path: buffers the caller has checked (the kernel still clamps lengths, pages and offsets)."""
        self._stats[0] = 0
        self._kernel.launch_ptrs(ptrs, stream)

    @property
    def tiles_computed(self) -> int:
        return int(self._stats[0])

    def forward(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(O, lse) of one call, both fresh arrays."""
        out = self(inputs)
        return out, self.lse.copy()

    def __repr__(self) -> str:
        return f"Attention{self._kernel!r}"
