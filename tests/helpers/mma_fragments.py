"""``mma.sync.m16n8k16`` (and m16n8k32 of 8-bit values) on register fragments as the PTX ISA lays them out, in NumPy:
the shared model the gemv cores' index tests (tests/emitters/cuda/test_cuda_gemv*.py) run their fragments through,
and the TMA gemv's walk of column tiles, splits and warps."""

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


def mma8(acc, a, b) -> None:
    """m16n8k32 with 8-bit operands (PTX ISA, "mma.m16n8k32"): lane (g, q)'s a0/a1/a2/a3 hold rows g, g+8, g, g+8
    at k 4q..4q+3, 4q..4q+3, 16+4q.., 16+4q..; b0/b1 column g at k 4q.. and 16+4q..; acc as ``mma``'s."""
    A, B = np.zeros((16, 32)), np.zeros((32, 8))
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        for reg, (row, k0) in enumerate(((g, 4 * q), (g + 8, 4 * q), (g, 16 + 4 * q), (g + 8, 16 + 4 * q))):
            A[row, k0:k0 + 4] = a[lane][reg]
        for reg, k0 in enumerate((4 * q, 16 + 4 * q)):
            B[k0:k0 + 4, g] = b[lane][reg]
    C = A @ B
    for lane in range(32):
        g, q = lane >> 2, lane & 3
        acc[lane] += (C[g, 2 * q], C[g, 2 * q + 1], C[g + 8, 2 * q], C[g + 8, 2 * q + 1])


def tma_gemv_walk(op, s, gemv_tma, nb: int, warp_sums) -> np.ndarray:
    """The TMA gemv's output: for each ``nb``-column tile, every split's and warp's sums (``warp_sums(n0, j0, j1,
    warp)`` -> acc[t][m][lane][e] over stages j0..j1) added through the kernel's fragment stores (mma row 16t + g
    (+ 8) is column, its column 2q (+1) of group m is A's row)."""
    mp, mg = gemv_tma.mpad(op), gemv_tma.mpad(op) // 8
    total = gemv_tma.k_stages(op, s)
    per = -(-total // s.splits)
    out = np.zeros((op.m, op.n))
    for n0 in range(0, op.n, nb):
        summed = np.zeros((mp, nb))
        for sp in range(s.splits):
            for warp in range(s.warps):
                acc = warp_sums(n0, sp * per, min(sp * per + per, total), warp)
                for lane in range(32):
                    g, q = lane >> 2, lane & 3
                    for t in range(4):
                        for m in range(mg):
                            for e in range(4):
                                summed[8 * m + 2 * q + (e & 1), 16 * t + 8 * (e >> 1) + g] += acc[t][m][lane][e]
        width = min(nb, op.n - n0)
        out[:, n0:n0 + width] = summed[:op.m, :width]
    return out
