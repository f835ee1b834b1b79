"""The SIMT GEMM's split over K (``split_k`` > 1, ``simt.py``): the grid holds ``split_k`` blocks per tile,
each multiplying an even share of the k tiles (``k_range``; ``split_index`` is the same in NumPy); each
stores its partial tile in the workspace (``workspace_bytes``: the tiles' arrival counters, then the
partials) and the last block of the tile to arrive sums the parts in order (``split_reduction``), so the
result does not depend on the order of arrival.
"""

from __future__ import annotations

from typing import Any

from . import split_arrival
from .plan import SimtKernel
from .render import CudaRenderer


def k_range(s: Any) -> list[str]:
    """The k tiles this block multiplies: all of them, or its part's (``split_index`` in NumPy: the K
    tiles split as evenly as they go, parts differing by at most one tile)."""
    if s.split_k == 1:
        return [f"const int ktiles = (K + {s.bk - 1}) / {s.bk};", "int k0 = 0, buf = 0;"]
    return [f"const int kt_all = (K + {s.bk - 1}) / {s.bk};",
            f"const int kt0 = (int)(((long long)part * kt_all) / {s.split_k}), "
            f"ktiles = (int)(((long long)(part + 1) * kt_all) / {s.split_k}) - kt0;",
            f"int k0 = kt0 * {s.bk}, buf = 0;"]


def split_index(kt_all: int, split: int) -> list[tuple[int, int]]:
    """(first k tile, k tiles) of each part, as the kernel computes them (the NumPy model's reference)."""
    return [(p * kt_all // split, (p + 1) * kt_all // split - p * kt_all // split) for p in range(split)]


def workspace_bytes(tiles: int, s: Any) -> int:
    """The arrival counters (one per tile, padded to 256 bytes) and ``split_k`` fp32 partial tiles per tile."""
    return 4 * _counter_words(tiles) + 4 * tiles * s.split_k * s.bm * s.bn


def _counter_words(tiles: int) -> int:
    return -(-tiles // 64) * 64


def split_reduction(k: SimtKernel, r: CudaRenderer) -> list[str]:
    """Each block stores its 8 x ``thread_n`` partial (F = 2 * thread_n float4 a thread, coalesced:
    float4 ``j`` of thread ``t`` of part ``p`` at ``(p * F + j) * threads + t`` of the tile's slab), fences,
    and arrives at its tile's counter (``split_arrival.last_block``). The last to arrive resets the counter
    and sums the parts 0, 1, .., split_k - 1 in that order (its own from registers: the same value), so that
    the sum does not depend on the order of arrival; the epilogue then runs once, on the sum."""
    s, nt = k.s, k.threads
    if s.split_k == 1:
        return []
    S = s.split_k
    acc4 = "make_float4(acc[i][h * 4], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3])"
    H = s.thread_n // 4  # float4 a row of the thread's tile
    F = 8 * H  # float4 a thread
    M, N, _ = k.mnk
    words = _counter_words(-(-M // s.bm) * -(-N // s.bn))
    summed = [f"#pragma unroll\nfor (int i = 0; i < 8; ++i)\n#pragma unroll\nfor (int h = 0; h < {H}; ++h) {{",
              "  float4 t = make_float4(0.f, 0.f, 0.f, 0.f);",
              f"  #pragma unroll 1\n  for (int p = 0; p < {S}; ++p) {{",
              f"    const float4 v = p == part ? {acc4} : __ldcg(tr_slab + (p * {F} + i * {H} + h) * {nt});",
              "    t.x += v.x; t.y += v.y; t.z += v.z; t.w += v.w;",
              "  }",
              "  acc[i][h * 4] = t.x; acc[i][h * 4 + 1] = t.y; acc[i][h * 4 + 2] = t.z; acc[i][h * 4 + 3] = t.w;",
              "}"]
    parked = [f"const float4* tr_slab = (const float4*)(W + {words}) + (size_t)pid * {S * F * nt} + tid;",
              f"float4* tr_mine = (float4*)(W + {words}) + (size_t)pid * {S * F * nt} + (size_t)part * {F * nt} + tid;",
              f"#pragma unroll\nfor (int i = 0; i < 8; ++i)\n#pragma unroll\nfor (int h = 0; h < {H}; ++h) "
              f"__stcg(tr_mine + (i * {H} + h) * {nt}, {acc4});"]
    return split_arrival.last_block(r, "W", "pid", S, "tid == 0", parked, summed)
