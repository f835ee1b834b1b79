"""``mma.sync.m16n8k16`` on register fragments as the PTX ISA lays them out, in NumPy: the shared model the gemv
cores' index tests (tests/emitters/cuda/test_cuda_gemv*.py) run their fragments through."""

from __future__ import annotations

import numpy as np


def mma(acc, a, b) -> None:
    """acc[lane] += (A @ B) fragments: a[lane] = 4 pairs of the 16 x 16 A, b[lane] = 2 pairs of the 16 x 8 B,
    acc[lane] = 4 floats of the 16 x 8 sum (rows g and g + 8, columns 2q and 2q + 1 of lane 4g + q)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        for e in range(2):
            A[g, 2 * q + e], A[g + 8, 2 * q + e] = a[lane][0][e], a[lane][1][e]
            A[g, 2 * q + 8 + e], A[g + 8, 2 * q + 8 + e] = a[lane][2][e], a[lane][3][e]
            B[2 * q + e, g], B[2 * q + 8 + e, g] = b[lane][0][e], b[lane][1][e]
    C = A @ B
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        acc[lane] += [C[g, 2 * q], C[g, 2 * q + 1], C[g + 8, 2 * q], C[g + 8, 2 * q + 1]]
